"""Adapters from agent frameworks' memory interfaces to :class:`~compozy_memory.MemoryInstance`.

Each adapter lives in its own module and imports its framework only there, so installing
compozy-memory never pulls a framework in:

* :mod:`compozy_memory.adapters.langchain` (extra ``langchain``): a LangChain
  ``BaseChatMessageHistory``.
* :mod:`compozy_memory.adapters.openai_agents` (extra ``openai-agents``): an OpenAI Agents SDK
  ``Session``.
* :mod:`compozy_memory.adapters.llama_index` (extra ``llama-index``): a LlamaIndex
  ``BaseChatStore``.

Every adapter appends through :meth:`~compozy_memory.MemoryInstance.append_many`, one atomic
script call per framework call, with the handle's default random dedupe key (none of the three
interfaces hands the store an idempotency key). So appends from any number of processes
interleave without loss, and a retry after a lost reply stores nothing twice.
"""
