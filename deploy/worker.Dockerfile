# The image of the fleet's Python services: the worker replicas, the stub Messages API and
# the replicas demo (docker-compose.yml builds it once as compozy-memory-worker:local).
FROM python:3.11-slim
WORKDIR /app
ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md LICENSE ./
COPY compozy_memory ./compozy_memory
COPY lua ./lua
RUN pip install .
COPY examples ./examples
USER nobody
CMD ["python", "examples/worker.py"]
