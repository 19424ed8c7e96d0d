"""Seeded long conversations with planted facts, for a fact-retention benchmark.

Two kinds of conversation, mixed across a run:

* ``friends``: two people chatting over 15-20 dated sessions spread across months (like the
  LoCoMo dataset), mostly small talk and phatic turns, with facts planted among them;
* ``agent``: a named user and an assistant that calls tools (Anthropic ``tool_use`` /
  ``tool_result`` blocks), where some facts exist only inside tool results.

Each planted fact may come with a question whose answer words must reach the model's context.
Some facts change later (the question asks for the latest value: the evidence is the update);
some answers sit in the reply to the turn that holds the question's words. Unasked facts of
the same shapes are planted too, as distractors. Sizes are approximate (4 characters a token).

Run ``python -m benchmarks.recall_data`` for statistics.
"""

# Vocabulary lists are written as text and split: easier to read and extend than literals.
# ruff: noqa: SIM905

from __future__ import annotations

import json
import random
import string
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

__all__ = ["Conversation", "Question", "approx_tokens", "generate", "message_text"]

TARGET_TOKENS = 26_000
QUESTIONS_PER_CONVERSATION = 100
CHARS_PER_TOKEN = 4

Kind = Literal["friends", "agent"]


@dataclass(frozen=True)
class Question:
    """A question about one planted fact.

    ``answer_words`` must all appear in the context for the answer to count; they all appear
    in ``messages[evidence_index]``. ``kind`` says how the fact was planted: ``direct``,
    ``reply`` (the answer is the reply to the turn holding the question's words), ``update``
    (a changed fact: the answer is the newest value) or ``tool`` (only in a tool result).
    """

    question: str
    answer_words: tuple[str, ...]
    evidence_index: int
    kind: str


@dataclass
class Conversation:
    """One generated conversation: messages ready to append, and questions about them."""

    conversation_id: str
    kind: Kind
    speakers: tuple[str, str]
    messages: list[dict[str, Any]]
    questions: list[Question]
    session_dates: list[str] = field(default_factory=list)

    def approx_tokens(self) -> int:
        """Approximate size in tokens (4 characters a token)."""
        return sum(approx_tokens(m) for m in self.messages)


def message_text(message: dict[str, Any]) -> str:
    """Everything a model would read of a message, as one string."""
    content = message["content"]
    if isinstance(content, str):
        return content
    parts: list[str] = []
    for block in content:
        if block["type"] == "text":
            parts.append(block["text"])
        elif block["type"] == "tool_use":
            parts.append(f"{block['name']} {json.dumps(block['input'])}")
        elif block["type"] == "tool_result":
            parts.append(str(block["content"]))
    return "\n".join(parts)


def approx_tokens(message: dict[str, Any]) -> int:
    """Approximate tokens of one message (4 characters a token, at least 1)."""
    return max(1, len(message_text(message)) // CHARS_PER_TOKEN)


# ---------------------------------------------------------------------------------------
# Vocabulary. Invented names keep facts unambiguous; shared everyday words keep BM25 honest.

_FIRST_NAMES = (
    "Caroline Melanie Priya Jonah Aiko Mateo Greta Omar Lena Tobias Ines Rafael Noor Felix "
    "Ingrid Dario Yara Keanu Sofia Elias Maren Tariq Hazel Bruno Leila Anton Signe Kofi Marta "
    "Ravi Zoe Emil Dalia Hugo Freya Nikhil Ada Lucan Mira Theo Selma Jasper Vera Idris Clara "
    "Osman Petra Bastian Amara Ronan Esme Linus Talia Soren Imani Casper Lotte Arjun Wren"
).split()
_CITIES = (
    "Lisbon Portland Kyoto Oaxaca Reykjavik Tucson Edinburgh Valencia Quebec Savannah Bergen "
    "Hanoi Asheville Marrakesh Tallinn Boulder Halifax Krakow Seville Cusco Ljubljana Hobart "
    "Galway Tbilisi Porto Nagano Bruges Mendoza Victoria Trieste Antigua Dunedin"
).split()
_PET_KINDS = "dog cat puppy kitten parrot rabbit hamster turtle goldfish ferret".split()
_PET_NAMES = (
    "Biscuit Luna Pepper Mochi Ziggy Noodle Waffles Pickles Juniper Ollie Maple Tofu Bingo "
    "Clover Nacho Pretzel Sprout Marble Cosmo Dumpling Fig Pumpkin Sushi Rocket Basil Olive"
).split()
_RELATIVES = (
    "sister brother cousin aunt uncle grandma grandpa niece nephew roommate neighbour".split()
)
_HOBBIES = (
    "pottery salsa watercolor guitar ceramics yoga climbing Italian sourdough woodworking "
    "photography chess calligraphy fencing knitting improv"
).split()
_FAVOURITES = {
    "ice cream flavour": "pistachio mango lavender stracciatella rhubarb cardamom".split(),
    "board game": "Catan Azul Wingspan Carcassonne Splendor Codenames".split(),
    "tea": "oolong rooibos genmaicha darjeeling chamomile sencha".split(),
    "season": "autumn spring winter summer".split(),
    "podcast": "Nightvale Radiolab Serial Hardcore Unexplained Invisibilia".split(),
    "pasta shape": "rigatoni orecchiette farfalle bucatini penne fusilli".split(),
    "flower": "peonies tulips dahlias ranunculus lilacs marigolds".split(),
    "cheese": "gruyere manchego halloumi gorgonzola comte taleggio".split(),
}
_COUNTED = (
    ("half marathons", "run", "ran"),
    ("tomato plants", "plant", "planted"),
    ("books", "read", "read"),
    ("loaves of bread", "bake", "baked"),
    ("jars of jam", "make", "made"),
    ("paintings", "finish", "finished"),
    ("quilts", "sew", "sewed"),
    ("scarves", "knit", "knitted"),
)
_RESTAURANTS = (
    "Cedar House|Blue Heron|Casa Lumen|Little Saigon|Olive Branch|Copper Pot|Juniper Table|"
    "Harbor Lights|Saffron Road|Green Fig|Tin Lantern|Red Kettle"
).split("|")
_BANDS = (
    "Velvet Anchors|Paper Moons|Glass Harbor|Static Orchard|Neon Pines|Hollow Birds|"
    "Silver Tongues|Quiet Riot Club|Amber Wolves|Lantern Kids"
).split("|")
_VENUES = "Fillmore|Roxy|Paramount|Greek Theatre|Ryman|Orpheum|Troubadour|Apollo".split("|")
_GIFTS = (
    "record player|hammock|espresso machine|telescope|kayak|sewing machine|drone|"
    "pottery wheel|ukulele|bread maker|rowing machine|typewriter"
).split("|")
_JOBS = "nurse architect librarian paramedic sommelier cartographer pharmacist".split()
_COMPANIES = (
    "Brightwave|Northwind Labs|Tallgrass Health|Orbital Foods|Keystone Bank|Pinecrest Clinic|"
    "Lumen Studio|Harborview Press|Fieldstone Energy|Quartz Robotics"
).split("|")
_CAR_MODELS = "Corolla Civic Outback Golf Mazda3 Forester Prius Leaf Impreza Jazz".split()
_COLORS = "red blue green silver black white yellow teal orange maroon navy".split()
_ALLERGENS = "shellfish peanuts sesame kiwi pollen penicillin cashews latex".split()
_EVENTS = (
    "housewarming party|piano recital|baby shower|retirement party|art show|graduation|"
    "book launch|engagement party"
).split("|")
_PLACES = (
    "animal shelter|food bank|community garden|public library|youth center|hospice|"
    "soup kitchen|wildlife rescue"
).split("|")
_SPORTS = "softball volleyball kickball pickleball ultimate frisbee basketball".split()
_PARKS = (
    "Riverside Park|Elm Field|Harmon Commons|Lakeview Park|Cypress Green|Miller Field|"
    "Brookside Park|Fairmount Oval"
).split("|")
_BOOKS = (
    "The Glass Orchard|Winter Lanterns|A Map of Salt|The Quiet Engine|Northern Tides|"
    "The Paper Garden|Small Hours|The Last Cartographer"
).split("|")
_AUTHORS = "Okafor Lindqvist Moreau Takahashi Brennan Castellano Novak Adeyemi".split()
_DIETS = "vegetarian vegan pescatarian keto gluten-free".split()
_SIZES = "small medium large XL".split()
_ITEMS = (
    "rain jacket|hiking boots|wool sweater|desk lamp|backpack|standing desk|air purifier|"
    "coffee grinder|yoga mat|office chair|blender|headphones"
).split("|")
_STATUSES = "shipped|in transit|out for delivery|delayed at customs|awaiting pickup".split("|")
_CARRIERS = "UPS FedEx DHL USPS Purolator Evri".split()
_PLANS = "Starter Growth Business Enterprise Team".split()
_ROOMS = "Aurora Birch Cobalt Delta Ember Fjord Granite Harbor".split()
_WEEKDAYS = "Monday Tuesday Wednesday Thursday Friday Saturday Sunday".split()
_MONTHS = (
    "January February March April May June July August September October November December"
).split()
_STREETS = "Baker Street|Linden Avenue|Harbor Road|Maple Lane|Orchard Way|Quarry Road".split("|")
_TRIPS = "honeymoon|ski trip|family reunion|road trip|conference trip|bachelor party".split("|")
_CONDITIONS = "light rain|sunny spells|heavy snow|thunderstorms|dense fog|clear skies".split("|")
_SIGHTS = "old town|harbor|cathedral|night market|waterfall|castle".split()


def _draw_number(rng: random.Random, pool: str) -> str:
    """Values that are made up on the spot rather than drawn from a list."""
    if pool in ("n", "n1", "n2"):
        return str(rng.randint(3, 60))
    if pool == "age":
        return str(rng.randint(2, 14))
    if pool == "days":
        return str(rng.randint(3, 16))
    if pool == "day":
        return str(rng.randint(1, 28))
    if pool == "oid":
        return str(rng.randint(1000, 99999))
    if pool == "amt":
        return f"{rng.randint(15, 480)}.{rng.randint(0, 99):02d}"
    if pool == "budget":
        return str(rng.randrange(800, 9000, 50))
    if pool == "trk":
        return "1Z" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=10))
    if pool == "ph":
        return f"555-{rng.randint(100, 999)}-{rng.randint(1000, 9999)}"
    if pool == "seats":
        return str(rng.randint(2, 250))
    if pool == "temp":
        return str(rng.randint(-8, 36))
    if pool == "gate":
        return f"{rng.choice('ABCDEF')}{rng.randint(1, 40)}"
    if pool == "seat":
        return f"{rng.randint(1, 38)}{rng.choice('ABCDEF')}"
    if pool == "flight":
        return f"{rng.choice(['TP', 'LH', 'KL', 'AC', 'BA'])}{rng.randint(100, 2999)}"
    if pool == "ref":
        return "".join(rng.choices(string.ascii_uppercase, k=6))
    if pool == "sku":
        return f"SKU-{rng.randint(1000, 9999)}-{rng.choice(['BL', 'GR', 'XL', 'SM'])}"
    if pool == "num":
        return str(rng.randint(2, 250))
    if pool == "time":
        return f"{rng.randint(8, 17)}:{rng.choice(['00', '15', '30', '45'])}"
    raise KeyError(pool)


_POOLS: dict[str, tuple[str, ...]] = {
    "person": tuple(_FIRST_NAMES),
    "city": tuple(_CITIES),
    "kind": tuple(_PET_KINDS),
    "pet": tuple(_PET_NAMES),
    "rel": tuple(_RELATIVES),
    "hobby": tuple(_HOBBIES),
    "restaurant": tuple(_RESTAURANTS),
    "band": tuple(_BANDS),
    "venue": tuple(_VENUES),
    "gift": tuple(_GIFTS),
    "job": tuple(_JOBS),
    "company": tuple(_COMPANIES),
    "model": tuple(_CAR_MODELS),
    "color": tuple(_COLORS),
    "allergen": tuple(_ALLERGENS),
    "event": tuple(_EVENTS),
    "place": tuple(_PLACES),
    "sport": tuple(_SPORTS),
    "park": tuple(_PARKS),
    "book": tuple(_BOOKS),
    "author": tuple(_AUTHORS),
    "diet": tuple(_DIETS),
    "size": tuple(_SIZES),
    "item": tuple(_ITEMS),
    "status": tuple(_STATUSES),
    "carrier": tuple(_CARRIERS),
    "plan": tuple(_PLANS),
    "room": tuple(_ROOMS),
    "weekday": tuple(_WEEKDAYS),
    "month": tuple(_MONTHS),
    "street": tuple(_STREETS),
    "trip": tuple(_TRIPS),
    "cond": tuple(_CONDITIONS),
    "sight": tuple(_SIGHTS),
}


# ---------------------------------------------------------------------------------------
# Fact templates. A turn is (who, text): "o" is the fact's owner, "x" the other speaker;
# in agent conversations "o" is the user, "x" the assistant, "call" a tool_use (text is the
# tool name, args follow) and "result" a tool_result. Placeholders name a pool; a trailing
# digit draws a second value from the same pool (city1, city2).


@dataclass(frozen=True)
class _Turn:
    who: str
    text: str
    args: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class _Fact:
    name: str
    kind: str
    key: str
    turns: tuple[_Turn, ...]
    evidence: int
    questions: tuple[str, ...]
    answer: tuple[str, ...]
    # For a changed fact: the later turns, the index of the evidence among them, and the
    # fills that change.
    update: tuple[_Turn, ...] = ()
    agent: bool = False
    # Facts sharing a slot cannot both be planted for one owner and key (their questions
    # would be ambiguous); ``once`` facts are planted at most once per owner.
    slot: str = ""
    once: bool = False


def _t(who: str, text: str, **args: str) -> _Turn:
    return _Turn(who, text, tuple(args.items()))


_FRIEND_FACTS: tuple[_Fact, ...] = (
    _Fact(
        "pet",
        "direct",
        "kind",
        (_t("o", "Big news: we adopted a {kind} last weekend! We named it {pet}."),),
        0,
        (
            "What is the name of the {kind} {o} adopted?",
            "What did {o} name the new {kind}?",
            "What is {o}'s {kind} called?",
        ),
        ("pet",),
        slot="pet",
    ),
    _Fact(
        "visit",
        "direct",
        "rel",
        (_t("o", "My {rel} {person} is flying in from {city} next week, I can't wait."),),
        0,
        ("Who is flying in from {city} to visit {o}?", "What is the name of {o}'s {rel}?"),
        ("person",),
        slot="rel",
    ),
    _Fact(
        "class",
        "direct",
        "hobby",
        (_t("o", "I signed up for a {hobby} class! The first session is on {month} {day}."),),
        0,
        ("When does {o}'s {hobby} class start?", "What date is the first {hobby} session?"),
        ("month", "day"),
    ),
    _Fact(
        "trip",
        "direct",
        "days",
        (_t("o", "We just got back from {days} days in {city}, the {sight} was unreal."),),
        0,
        ("Which city did {o} visit for {days} days?", "Where was {o}'s trip with the {sight}?"),
        ("city",),
    ),
    _Fact(
        "count",
        "direct",
        "counted",
        (_t("o", "Fun fact, I've {done} {n} {counted} so far this year."),),
        0,
        ("How many {counted} has {o} {done} this year?", "What number of {counted} did {o} do?"),
        ("n",),
        slot="count",
    ),
    _Fact(
        "job",
        "direct",
        "job",
        (_t("o", "I start my new job as a {job} at {company} on Monday!"),),
        0,
        ("Where is {o} starting work as a {job}?", "Which company hired {o} as a {job}?"),
        ("company",),
    ),
    _Fact(
        "car",
        "direct",
        "model",
        (_t("o", "Finally bought a car, a used {color} {model} with low mileage."),),
        0,
        ("What colour is the {model} {o} bought?", "Which car model did {o} purchase?"),
        ("color",),
    ),
    _Fact(
        "allergy",
        "direct",
        "allergen",
        (_t("o", "Turns out I'm allergic to {allergen}, the doctor confirmed it today."),),
        0,
        ("What did the doctor say {o} is allergic to?", "What allergy does {o} have?"),
        ("allergen",),
        once=True,
    ),
    _Fact(
        "event",
        "direct",
        "event",
        (_t("o", "Our {event} is on {month} {day}, save the date!"),),
        0,
        ("What date is {o}'s {event}?", "When is the {event} {o} is hosting?"),
        ("month", "day"),
    ),
    _Fact(
        "book",
        "direct",
        "book",
        (_t("o", "I'm reading {book} by {author} and I can't put it down."),),
        0,
        ("Who wrote the book {o} couldn't put down?", "Who is the author of {book}?"),
        ("author",),
    ),
    _Fact(
        "volunteer",
        "direct",
        "place",
        (_t("o", "I started volunteering at the {place} every {weekday}."),),
        0,
        ("On which day does {o} volunteer at the {place}?", "When does {o} volunteer?"),
        ("weekday",),
    ),
    _Fact(
        "league",
        "direct",
        "sport",
        (_t("o", "I joined a {sport} league, we play at {park} on Thursdays."),),
        0,
        ("Where does {o}'s {sport} league play?", "Which park hosts the {sport} games?"),
        ("park",),
    ),
    _Fact(
        "child",
        "direct",
        "person",
        (_t("o", "Can you believe my nephew {person} just turned {age}?"),),
        0,
        ("How old is {o}'s nephew {person}?", "What age did {person} turn?"),
        ("age",),
    ),
    _Fact(
        "favourite",
        "direct",
        "fav",
        (_t("o", "Honestly my favourite {fav} is {favval}, nothing beats it."),),
        0,
        ("What {fav} does {o} like best?", "Which {fav} is {o}'s top pick?"),
        ("favval",),
        slot="fav",
    ),
    # The answer is the reply to the turn that holds the question's words.
    _Fact(
        "gift",
        "reply",
        "person",
        (
            _t("x", "What did you end up getting {person} for the birthday?"),
            _t("o", "A {gift}! Honestly it was a hit."),
        ),
        1,
        ("What birthday present did {o} get for {person}?", "What did {person} get from {o}?"),
        ("gift",),
    ),
    _Fact(
        "dinner",
        "reply",
        "restaurant",
        (
            _t("x", "So where did you go for the anniversary dinner?"),
            _t("o", "{restaurant}, the chef even sent out dessert."),
        ),
        1,
        ("Which restaurant did {o} pick for the anniversary dinner?",),
        ("restaurant",),
    ),
    _Fact(
        "concert",
        "reply",
        "venue",
        (
            _t("x", "Who did you see at the {venue} on Friday?"),
            _t("o", "{band}! We were right at the front."),
        ),
        1,
        ("Which band did {o} see at the {venue}?", "Who played the {venue} show {o} went to?"),
        ("band",),
    ),
    _Fact(
        "jars",
        "reply",
        "counted",
        (
            _t("x", "How many {counted} did you {do} in the end?"),
            _t("o", "{n}, way more than I planned haha"),
        ),
        1,
        ("How many {counted} did {o} {do} in the end?",),
        ("n",),
        slot="count",
    ),
    _Fact(
        "relname",
        "reply",
        "rel",
        (
            _t("x", "Remind me, what's your {rel}'s name again?"),
            _t("o", "{person}. You'd love them."),
        ),
        1,
        ("What is the name of {o}'s {rel}?", "What is {o}'s {rel} called?"),
        ("person",),
        slot="rel",
    ),
    _Fact(
        "tripcity",
        "reply",
        "trip",
        (
            _t("x", "Did you two decide where the {trip} is going to be?"),
            _t("o", "Yes! {city}, mostly because of the {sight}."),
        ),
        1,
        ("Where is {o}'s {trip} going to be?", "Which city was chosen for the {trip}?"),
        ("city",),
    ),
    # Changed facts: the question wants the newest value, so the update is the evidence.
    _Fact(
        "move",
        "update",
        "city1",
        (_t("o", "We're moving to {city1} in the fall, it's official!"),),
        0,
        ("Where is {o} moving to?", "Which city is {o} relocating to?"),
        ("city2",),
        update=(_t("o", "Change of plans: we're moving to {city2} instead of {city1}."),),
        once=True,
    ),
    _Fact(
        "rename",
        "update",
        "kind",
        (_t("o", "We're getting a {kind}, we'll probably call it {pet1}."),),
        0,
        ("What name did {o} finally give the {kind}?", "What is {o}'s {kind} named now?"),
        ("pet2",),
        update=(_t("o", "We ended up naming the {kind} {pet2}, {pet1} just didn't fit."),),
        slot="pet",
    ),
    _Fact(
        "favchange",
        "update",
        "fav",
        (_t("o", "My favourite {fav} is {favval1}, no contest."),),
        0,
        ("What is {o}'s favourite {fav} these days?", "Which {fav} does {o} prefer now?"),
        ("favval2",),
        update=(_t("o", "Okay I've switched, {favval2} is my new favourite {fav}."),),
        slot="fav",
    ),
    _Fact(
        "guests",
        "update",
        "n1",
        (_t("o", "The wedding is going to be small, about {n1} guests."),),
        0,
        ("How many guests are coming to {o}'s wedding?", "What's the wedding guest count?"),
        ("n2",),
        update=(_t("o", "The guest list grew again, we're at {n2} guests now."),),
        once=True,
    ),
)

_AGENT_FACTS: tuple[_Fact, ...] = (
    _Fact(
        "order",
        "tool",
        "oid",
        (
            _t("o", "Can you check on my order #{oid}?"),
            _t("call", "lookup_order", order_id="{oid}"),
            _t(
                "result",
                "Order {oid}: status {status}; carrier {carrier}; tracking {trk}; "
                "items: {item}; total ${amt}; estimated delivery {month} {day}.",
            ),
            _t("x", "I found it: your order is moving along and should reach you soon."),
        ),
        2,
        (
            "Which carrier is delivering order {oid}?",
            "What was the total charged for order {oid}?",
            "What is the tracking number of order #{oid}?",
            "When is order {oid} expected to arrive?",
        ),
        ("carrier",),
        agent=True,
    ),
    _Fact(
        "account",
        "tool",
        "plan",
        (
            _t("o", "How many seats do we have on our subscription right now?"),
            _t("call", "get_account", account="{o}@example.com"),
            _t(
                "result",
                "Account {o}@example.com: plan {plan}; seats {seats}; renews {month} "
                "{day}; account manager {person2}.",
            ),
            _t("x", "Here's what I see on your account; let me know if you want changes."),
        ),
        2,
        (
            "How many seats are on {o}'s subscription?",
            "Who is the account manager on {o}'s subscription?",
        ),
        ("seats",),
        agent=True,
        once=True,
    ),
    _Fact(
        "weather",
        "tool",
        "city",
        (
            _t("o", "What's the weather looking like in {city} for my trip?"),
            _t("call", "get_forecast", city="{city}"),
            _t("result", "Forecast for {city}: {cond}, high of {temp} C, wind 12 km/h."),
            _t("x", "Looks manageable; pack layers just in case."),
        ),
        2,
        ("What conditions were forecast in {city}?", "What was the forecast high in {city}?"),
        ("cond",),
        agent=True,
    ),
    _Fact(
        "flight",
        "tool",
        "ref",
        (
            _t("o", "Can you pull up booking {ref}?"),
            _t("call", "get_booking", reference="{ref}"),
            _t(
                "result",
                "Booking {ref}: flight {flight} to {city}, departs {time}, gate {gate}, "
                "seat {seat}.",
            ),
            _t("x", "Got it, everything on that booking looks confirmed."),
        ),
        2,
        ("Which gate does booking {ref} leave from?", "What seat is on booking {ref}?"),
        ("gate",),
        agent=True,
    ),
    _Fact(
        "meeting",
        "tool",
        "event",
        (
            _t("o", "When is the {event} planning meeting again?"),
            _t("call", "find_meeting", title="{event} planning"),
            _t(
                "result",
                "Meeting '{event} planning': {weekday} {month} {day} at {time}, room {room}, "
                "organiser {person}.",
            ),
            _t("x", "It's on your calendar; I can send a reminder if you like."),
        ),
        2,
        (
            "Which room is the {event} planning meeting in?",
            "Who organised the {event} planning meeting?",
        ),
        ("room",),
        agent=True,
    ),
    _Fact(
        "stock",
        "tool",
        "sku",
        (
            _t("o", "Is the {item} back in stock? It's {sku}."),
            _t("call", "check_inventory", sku="{sku}"),
            _t("result", "{sku}: {num} units available at the {city} warehouse."),
            _t("x", "Good news, it's available, want me to reserve one?"),
        ),
        2,
        ("How many units of {sku} were available?", "Which warehouse stocks {sku}?"),
        ("num",),
        agent=True,
    ),
    _Fact(
        "office",
        "direct",
        "street",
        (
            _t("o", "For future orders please ship to my office at {num} {street}."),
            _t("x", "Noted, I'll use that address from now on."),
        ),
        0,
        ("What address should {o}'s orders ship to?", "Which street is {o}'s office on?"),
        ("num", "street"),
        agent=True,
        once=True,
    ),
    _Fact(
        "employer",
        "direct",
        "company",
        (
            _t("o", "Context for the cover letter: I work at {company} as a {job}."),
            _t("x", "Thanks, I'll tailor the letter to that role."),
        ),
        0,
        ("Where does {o} work?", "What is {o}'s job title at {company}?"),
        ("company",),
        agent=True,
        once=True,
    ),
    _Fact(
        "size",
        "reply",
        "item",
        (
            _t("o", "I'd like to reorder the {item} I bought last time."),
            _t("x", "Happy to. Which size and colour would you like for the {item}?"),
            _t("o", "{size}, in {color} please."),
            _t("x", "Done, I've added it to your cart."),
        ),
        2,
        ("What size {item} did {o} choose?", "What colour did {o} want for the {item}?"),
        ("size",),
        agent=True,
    ),
    _Fact(
        "budget",
        "reply",
        "trip",
        (
            _t("o", "Help me plan the {trip}."),
            _t("x", "Sure. What budget should I plan the {trip} around?"),
            _t("o", "Around ${budget} all in."),
            _t("x", "Great, I'll keep suggestions within that."),
        ),
        2,
        ("What budget did {o} set for the {trip}?", "How much can {o} spend on the {trip}?"),
        ("budget",),
        agent=True,
    ),
    _Fact(
        "phone",
        "update",
        "ph1",
        (_t("o", "My phone number is {ph1} if the courier needs it."), _t("x", "Saved.")),
        0,
        ("What is {o}'s current phone number?", "Which number should the courier call?"),
        ("ph2",),
        update=(
            _t("o", "Update: I got a new phone number, it's {ph2}."),
            _t("x", "Updated, thanks."),
        ),
        agent=True,
        once=True,
    ),
    _Fact(
        "diet",
        "update",
        "diet1",
        (
            _t("o", "When you suggest recipes, remember I'm {diet1}."),
            _t("x", "Got it, I'll keep that in mind."),
        ),
        0,
        ("What diet does {o} follow now?", "What should recipes for {o} respect?"),
        ("diet2",),
        update=(
            _t("o", "Heads up, I switched from {diet1} to {diet2} last month."),
            _t("x", "Thanks for telling me, I'll adjust."),
        ),
        agent=True,
        once=True,
    ),
)

# Which fill a template's question needs answered, when it offers several questions: the
# n-th question of these templates asks about the n-th fill listed here.
_QUESTION_ANSWERS: dict[str, tuple[tuple[str, ...], ...]] = {
    "visit": (("person",), ("person",)),
    "car": (("color",), ("model",)),
    "book": (("author",), ("author",)),
    "order": (("carrier",), ("amt",), ("trk",), ("month", "day")),
    "account": (("seats",), ("person2",)),
    "weather": (("cond",), ("temp",)),
    "flight": (("gate",), ("seat",)),
    "meeting": (("room",), ("person",)),
    "stock": (("num",), ("city",)),
    "employer": (("company",), ("job",)),
    "size": (("size",), ("color",)),
}

# ---------------------------------------------------------------------------------------
# Small talk. Everyday words on purpose: pets, trips, classes, dinners, orders.

_PHATIC = (
    "Hey {x}!",
    "Hi {x}, how's it going?",
    "haha yes",
    "lol same",
    "Agreed, {x}.",
    "Talk soon!",
    "Totally.",
    "Love that!",
    "Omg yes",
    "So true",
    "Aww",
    "That's awesome!",
    "Good night!",
    "Miss you!",
    "Same here.",
    "Ha, fair enough.",
    "Right?!",
    "For sure",
    "Congrats!!",
    "No way!",
    "Sounds fun!",
    "Haha I bet",
    "Ugh, I know.",
    "Yesss",
    "Take care, {x}!",
    "Morning {x}!",
    "hahaha",
    "Oh nice",
    "Wow.",
    "Good luck!",
    "That's wild",
    "Same, honestly.",
    "You deserve it!",
    "Thanks {x}!",
    "Hugs!",
)
_SMALL_TALK = (
    "The weather has been so {adj} here lately, I barely left the house.",
    "Have you watched {show} yet? I'm a few episodes in.",
    "Work has been {adj} this week, so many {worknoun}.",
    "I made {dish} for dinner last night and it turned out pretty {adj}.",
    "We took the {kind} to the park this morning, it was so happy.",
    "Thinking about signing up for a {hobby} class at some point.",
    "My {rel} keeps sending me {kind} videos, it's adorable.",
    "Did you catch the game on {weekday}? What a finish.",
    "I really need a vacation, maybe somewhere like {city}.",
    "How's your {rel} doing these days?",
    "We should grab {meal} sometime soon, it's been ages.",
    "Been trying to get back into {hobby}, harder than I remember.",
    "The {shop} near my place just closed, so sad.",
    "Can't believe it's already {month}, this year is flying.",
    "My order from last week still hasn't shown up, typical.",
    "I keep meaning to call my {rel}, maybe this weekend.",
    "Just finished a long run, my legs are {adj}.",
    "The traffic downtown was {adj} today.",
    "I tried a new recipe with {ingredient}, not bad at all.",
    "Our neighbour's {kind} got out again and ran through the garden.",
    "I think I need a new phone, this one dies by noon.",
    "We spent the whole {weekday} cleaning the garage.",
    "Do you still go to that {hobby} group on weekends?",
    "I saw a {kind} that looked exactly like yours at the park!",
    "Dinner plans fell through so it's leftovers again.",
    "The birthday party last weekend was {adj}, so many kids.",
    "My playlist has been all {genre} lately.",
    "I'm so tired, the {kind} woke me up at 5am.",
    "Planning a small trip, nothing booked yet though.",
    "I have a dentist appointment on {weekday}, wish me luck.",
    "Finally fixed the leaky sink, felt like a genius.",
    "We're thinking about repainting the living room {color}.",
)
_FILLS: dict[str, tuple[str, ...]] = {
    "adj": tuple(
        "wild hectic great weird lovely brutal chill gloomy sunny exhausting fun sore".split()
    ),
    "show": ("Severance", "The Bear", "Slow Horses", "Shogun", "Bluey", "Reservation Dogs"),
    "worknoun": tuple("meetings deadlines emails reviews interviews reports".split()),
    "dish": tuple("curry lasagna tacos risotto dumplings shakshuka chili paella".split()),
    "meal": ("brunch", "coffee", "lunch", "dinner", "drinks", "tacos"),
    "shop": ("bakery", "bookstore", "coffee shop", "record store", "florist", "deli"),
    "ingredient": tuple("miso tahini fennel chickpeas harissa lemongrass".split()),
    "genre": ("jazz", "folk", "synthwave", "old soul", "bossa nova", "punk"),
}

_AGENT_SMALL = (
    (
        "Can you suggest a quick {dish} recipe for tonight?",
        "Sure! For an easy {dish}: start by softening an onion and two cloves of garlic in "
        "olive oil for about {n} minutes, add your main ingredients and spices, then simmer "
        "until everything is tender. Taste, adjust the salt, and finish with something fresh "
        "like herbs or a squeeze of lemon. It keeps well for a couple of days in the fridge.",
    ),
    (
        "Explain {topic} in simple terms?",
        "In short, {topic} is about breaking a big problem into smaller pieces you can "
        "reason about. People usually start with a simple model, check it against real "
        "examples, and refine it when the examples disagree. The key ideas are to keep each "
        "step small, measure what you change, and write down why you made each choice.",
    ),
    (
        "Can you help me write a short message to my {rel}?",
        "Of course. Here's a draft: 'Hi! I've been thinking about you and wanted to check in. "
        "It's been a busy few weeks here, but I'd love to catch up soon, maybe over {meal}? "
        "Let me know what works for you.' Feel free to tweak the tone.",
    ),
    (
        "Any tips for staying focused while working from home?",
        "A few that help most people: keep a fixed start time, work in blocks of about {n} "
        "minutes with short breaks, keep your phone in another room, and write tomorrow's "
        "first task down before you stop for the day. A separate spot for work helps too.",
    ),
    (
        "What should I pack for a weekend hike?",
        "Water, snacks, a light rain jacket, a warm layer, sunscreen, a map or offline app, "
        "a small first aid kit and a headlamp. Break in your boots beforehand and tell "
        "someone your route. For a {n} km trail, start early to finish in daylight.",
    ),
    (
        "How do I get a stain out of a {color} shirt?",
        "Act quickly: blot (don't rub), rinse from the back with cold water, then work in a "
        "little dish soap or a stain remover and let it sit for {n} minutes before washing. "
        "Check the stain is gone before drying, since heat can set it.",
    ),
)
_AGENT_TOPICS = (
    "compound interest",
    "photosynthesis",
    "inflation",
    "machine learning",
    "jet lag",
    "sourdough starters",
    "credit scores",
    "solar panels",
    "the immune system",
)
_AGENT_PHATIC = (
    ("Thanks, that helps!", "You're welcome! Anything else I can help with?"),
    ("Perfect, thank you.", "Glad to help."),
    ("ok cool", "Let me know if you need anything else."),
    ("Great, that's all for now.", "Sounds good, have a nice day!"),
    ("haha nice", "Happy to help!"),
)


# ---------------------------------------------------------------------------------------
# Assembly.


@dataclass
class _Planned:
    """A fact's turns, ready to place, with the question (if asked) attached to one turn."""

    turns: list[tuple[str, Any]]  # (who, content)
    question: tuple[str, tuple[str, ...], str] | None = None  # text, answer words, kind
    evidence: int = 0
    session_floor: int = 0  # earliest session (for updates)
    session_ceiling: int = 10_000  # latest session (for an update's first version)
    group: int = -1  # an update's two halves share a group


class _Builder:
    def __init__(self, rng: random.Random, kind: Kind, index: int) -> None:
        self.rng = rng
        self.kind = kind
        self.conversation_id = f"{kind}-{index:02d}"
        self._tool_ids = 0
        names = rng.sample(_FIRST_NAMES, 2)
        self.speakers = (names[0], names[1] if kind == "friends" else "assistant")
        self._used_keys: set[tuple[str, str, str]] = set()
        self._shuffled: dict[str, list[str]] = {}

    def draw(self, pool: str) -> str:
        """A value from a pool, without repeats until the pool runs out."""
        if pool not in _POOLS:
            return _draw_number(self.rng, pool)
        bag = self._shuffled.get(pool)
        if not bag:
            bag = list(_POOLS[pool])
            self.rng.shuffle(bag)
            self._shuffled[pool] = bag
        return bag.pop()

    def tool_id(self) -> str:
        self._tool_ids += 1
        return f"toolu_{self.conversation_id.replace('-', '')}_{self._tool_ids:04d}"

    def _fills(self, fact: _Fact, owner: int) -> dict[str, str] | None:
        fills: dict[str, str] = {}
        names = self.speakers
        fills["o"] = names[owner]
        fills["x"] = names[1 - owner]
        if fact.name in ("count", "jars"):
            counted, do, done = self.rng.choice(_COUNTED)
            fills.update(counted=counted, do=do, done=done)
        if fact.key == "fav" or fact.name in ("favourite", "favchange"):
            fav = self.rng.choice(sorted(_FAVOURITES))
            values = self.rng.sample(_FAVOURITES[fav], 2)
            fills.update(fav=fav, favval=values[0], favval1=values[0], favval2=values[1])
        if fact.name == "diet":
            first, second = self.rng.sample(_DIETS, 2)
            fills.update(diet1=first, diet2=second)
        key_value = fills.get(fact.key) or self.draw(fact.key.rstrip("12"))
        fills.setdefault(fact.key, key_value)
        used = (fact.slot or fact.name, names[owner], "" if fact.once else key_value)
        if used in self._used_keys:
            return None
        self._used_keys.add(used)
        texts = [t.text for t in fact.turns + fact.update] + list(fact.questions)
        texts += [v for t in fact.turns + fact.update for _, v in t.args]
        for text in texts:
            for _, name, _, _ in string.Formatter().parse(text):
                if name and name not in fills:
                    fills[name] = self.draw(name.rstrip("12"))
                    if name.endswith("2") and fills[name] == fills.get(name[:-1] + "1"):
                        fills[name] = self.draw(name.rstrip("12"))
        return fills

    def _content(self, turn: _Turn, fills: dict[str, str], call_id: list[str]) -> Any:
        if turn.who == "call":
            call_id[0] = self.tool_id()
            args = {key: value.format(**fills) for key, value in turn.args}
            return [{"type": "tool_use", "id": call_id[0], "name": turn.text, "input": args}]
        if turn.who == "result":
            return [
                {
                    "type": "tool_result",
                    "tool_use_id": call_id[0],
                    "content": turn.text.format(**fills),
                }
            ]
        return turn.text.format(**fills)

    def plan(self, fact: _Fact, ask: bool, group: int) -> list[_Planned] | None:
        owner = self.rng.randrange(2) if self.kind == "friends" else 0
        fills = self._fills(fact, owner)
        if fills is None:
            return None
        call_id = [""]

        def who(turn: _Turn) -> str:
            if turn.who in ("o", "x"):
                return str(owner if turn.who == "o" else 1 - owner)
            return turn.who

        first = _Planned([(who(t), self._content(t, fills, call_id)) for t in fact.turns])
        planned = [first]
        evidence_part, evidence = first, fact.evidence
        if fact.update:
            second = _Planned([(who(t), self._content(t, fills, call_id)) for t in fact.update])
            first.group = second.group = group
            planned.append(second)
            evidence_part, evidence = second, 0
        if ask:
            choice = self.rng.randrange(len(fact.questions))
            answer_fills = _QUESTION_ANSWERS.get(fact.name, (fact.answer,) * 4)[choice]
            words = tuple(w for name in answer_fills for w in fills[name].split())
            evidence_part.question = (fact.questions[choice].format(**fills), words, fact.kind)
            evidence_part.evidence = evidence
        return planned


def _small_talk(builder: _Builder, speaker: int) -> str:
    rng = builder.rng
    x = builder.speakers[1 - speaker]
    if rng.random() < 0.3:
        return rng.choice(_PHATIC).format(x=x)
    sentences = []
    for _ in range(rng.choice((1, 2, 2, 3))):
        template = rng.choice(_SMALL_TALK)
        fills = {
            name: rng.choice(_FILLS[name]) if name in _FILLS else rng.choice(_POOLS[name])
            for _, name, _, _ in string.Formatter().parse(template)
            if name
        }
        sentences.append(template.format(**fills))
    if rng.random() < 0.2:
        sentences.insert(0, rng.choice(("Haha", "Oh", "Honestly", "Ok so", x)) + ",")
    return " ".join(sentences)


def _agent_small_talk(builder: _Builder) -> list[tuple[str, Any]]:
    rng = builder.rng
    if rng.random() < 0.3:
        user, assistant = rng.choice(_AGENT_PHATIC)
        return [("0", user), ("1", assistant)]
    user, assistant = rng.choice(_AGENT_SMALL)
    fills = {
        "dish": rng.choice(_FILLS["dish"]),
        "topic": rng.choice(_AGENT_TOPICS),
        "rel": rng.choice(_RELATIVES),
        "meal": rng.choice(_FILLS["meal"]),
        "color": rng.choice(_COLORS),
        "n": str(rng.randint(5, 40)),
    }
    return [("0", user.format(**fills)), ("1", assistant.format(**fills))]


def _plan_facts(builder: _Builder, n_sessions: int) -> list[_Planned]:
    rng = builder.rng
    facts = _FRIEND_FACTS if builder.kind == "friends" else _AGENT_FACTS
    planned: list[_Planned] = []
    asked = 0
    extra = 0
    group = 0
    attempts = 0
    # About 100 asked facts plus 40% more unasked ones of the same shapes as distractors.
    while (asked < QUESTIONS_PER_CONVERSATION or extra < 40) and attempts < 5000:
        attempts += 1
        fact = rng.choice(facts)
        ask = asked < QUESTIONS_PER_CONVERSATION and (extra >= 40 or rng.random() < 0.72)
        parts = builder.plan(fact, ask, group)
        if parts is None:
            continue
        if len(parts) == 2:
            group += 1
            first_session = rng.randrange(0, max(1, n_sessions // 2))
            parts[0].session_ceiling = first_session
            parts[1].session_floor = first_session + rng.randint(2, max(2, n_sessions // 2))
        planned.extend(parts)
        if ask:
            asked += 1
        else:
            extra += 1
    return planned


def _build(rng: random.Random, kind: Kind, index: int) -> Conversation:
    builder = _Builder(rng, kind, index)
    n_sessions = rng.randint(15, 20)
    day = date(2023, 1, 1) + timedelta(days=rng.randrange(0, 240))
    session_dates: list[date] = []
    for _ in range(n_sessions):
        session_dates.append(day)
        day += timedelta(days=rng.randint(4, 16))

    by_session: list[list[_Planned]] = [[] for _ in range(n_sessions)]
    for part in _plan_facts(builder, n_sessions):
        low = min(part.session_floor, n_sessions - 1)
        high = min(part.session_ceiling, n_sessions - 1)
        by_session[rng.randint(low, max(low, high))].append(part)

    messages: list[dict[str, Any]] = []
    questions: list[Question] = []
    budget = TARGET_TOKENS * CHARS_PER_TOKEN / n_sessions

    def emit(who: str, content: Any, session: int) -> None:
        meta = {"session": session + 1, "date": session_dates[session].isoformat()}
        if who in ("call", "1") and kind == "agent":
            messages.append({"role": "assistant", "content": content, "metadata": meta})
        elif who == "result":
            messages.append({"role": "user", "content": content, "metadata": meta})
        else:
            speaker = int(who)
            message = {
                "role": "user",
                "content": content,
                "name": builder.speakers[speaker],
                "metadata": meta,
            }
            messages.append(message)

    for session in range(n_sessions):
        parts = by_session[session]
        rng.shuffle(parts)
        marks = sorted(rng.uniform(0.05, 0.95) * budget for _ in parts)
        chars = 0.0
        last = 1
        placed = 0
        opener = rng.randrange(2) if kind == "friends" else 0
        units: list[list[tuple[str, Any]]] = []
        if kind == "friends":
            units.append([(str(opener), _small_talk(builder, opener))])
        else:
            name = builder.speakers[0]
            units.append([("0", f"Hi, it's {name} again."), ("1", f"Welcome back, {name}!")])
        while chars < budget or placed < len(parts):
            if placed < len(parts) and chars >= marks[placed]:
                part = parts[placed]
                placed += 1
                units.append([*part.turns, ("q", part)])
            elif kind == "friends":
                speaker = 1 - last if rng.random() < 0.85 else last
                units.append([(str(speaker), _small_talk(builder, speaker))])
                last = speaker
            else:
                units.append(_agent_small_talk(builder))
            for who, content in units[-1]:
                if who != "q":
                    chars += len(message_text({"content": content}))
        units.append(
            [(str(1 - last), rng.choice(("Talk soon!", "Bye!", "Catch you later!")))]
            if kind == "friends"
            else [("0", "That's everything, thanks."), ("1", "Anytime. Talk soon!")]
        )
        previous = ""
        for unit in units:
            positions: list[int] = []
            for who, content in unit:
                if who == "q":
                    assert isinstance(content, _Planned)
                    if content.question is not None:
                        text, words, qkind = content.question
                        evidence = positions[content.evidence]
                        questions.append(Question(text, words, evidence, qkind))
                    continue
                if kind == "friends" and who == previous:
                    # Two turns in a row from one speaker read oddly: let the other react.
                    reaction = rng.choice(_PHATIC).format(x=builder.speakers[int(who)])
                    emit(str(1 - int(who)), reaction, session)
                positions.append(len(messages))
                emit(who, content, session)
                previous = who
    questions.sort(key=lambda q: q.evidence_index)
    return Conversation(
        builder.conversation_id,
        kind,
        builder.speakers,
        messages,
        questions,
        [d.isoformat() for d in session_dates],
    )


def generate(n_conversations: int = 10, seed: int = 0) -> list[Conversation]:
    """``n_conversations`` conversations, alternately ``friends`` and ``agent`` (60/40).

    The same ``seed`` always gives the same conversations.
    """
    conversations = []
    for index in range(n_conversations):
        rng = random.Random(f"{seed}:{index}")
        kind: Kind = "agent" if index % 5 in (1, 3) else "friends"
        conversations.append(_build(rng, kind, index))
    return conversations


def _main() -> None:
    conversations = generate()
    print(f"{'conversation':<14}{'kind':<9}{'messages':>9}{'~tokens':>9}{'questions':>10}  kinds")
    for conv in conversations:
        kinds = Counter(q.kind for q in conv.questions)
        detail = " ".join(f"{k}={v}" for k, v in sorted(kinds.items()))
        print(
            f"{conv.conversation_id:<14}{conv.kind:<9}{len(conv.messages):>9}"
            f"{conv.approx_tokens():>9}{len(conv.questions):>10}  {detail}"
        )


if __name__ == "__main__":
    _main()
