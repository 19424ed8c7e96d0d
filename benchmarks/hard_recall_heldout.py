"""The held-out split's bank: FROZEN. Written before the tuning bank and before any tuning.

Nothing is tuned on this split: ``benchmarks.bench_hard_recall --tune`` refuses it, every
default (fusion weights, candidate counts, the summary share) is chosen on the tuning split
and only then measured here, and ``tests/test_hard_recall_data.py`` checks this file's
SHA-256 so an edit cannot pass unnoticed. Its names, values, filler and templates share
nothing on purpose with ``benchmarks/hard_recall_tuning.py``.
"""

# Name lists are written as text and split: easier to read than literals.
# ruff: noqa: SIM905

from __future__ import annotations

from benchmarks.hard_recall_bank import Bank, Family, Hop, HopAttribute

__all__ = ["HELDOUT"]

_CITIES = (
    "Ljubljana",
    "Valparaiso",
    "Tromso",
    "Matera",
    "Luang Prabang",
    "Cartagena",
    "Zanzibar",
    "Kotor",
    "Hoi An",
    "Sintra",
)

HELDOUT = Bank(
    name="heldout",
    names=tuple(
        "Anouk Bertrand Cosima Desmond Elodie Fintan Giselle Horatio Isolde Jovan Katja "
        "Lorcan Mireille Nestor Odile Pascal Quilla Rosalind Stellan Thora Ulric Viveka "
        "Wendell Xanthe Yusuf Zelda Ambrose Brigid Cormac Delphine".split()
    ),
    filler=(
        "The rain hasn't stopped since Tuesday, the garden is basically a pond.",
        "I binged three episodes of that baking show last night, no regrets.",
        "Work is fine, just a lot of meetings that could have been emails.",
        "Have you ever thought about getting a dog? I keep going back and forth.",
        "My job is eating my evenings again, I need a better routine.",
        "A proper vacation feels like a distant dream at this point.",
        "The music shop on the corner closed down, which is sad.",
        "I'd love to read more novels but I fall asleep after two pages.",
        "Any plans for the weekend, {other}?",
        "The neighbours are renovating and the drilling starts at seven sharp.",
        "I tried a new soup recipe, lentils and far too much cumin.",
        "Traffic on the ring road was a nightmare this morning.",
        "Did you see the match on Sunday? What a finish.",
        "I keep meaning to call my parents more often.",
        "The heating bill this month made me wince.",
        "Honestly I just want a quiet week with nothing in the calendar.",
        "My phone screen cracked again, third time this year.",
        "We should grab coffee when things calm down, {other}.",
        "I reorganised the kitchen cupboards and now I can't find anything.",
        "The new series everyone talks about didn't grab me at all.",
        "Car insurance renewal came in and it went up again, of course.",
        "I walked past that bakery you like, the queue was round the block.",
        "Moving house must be so stressful, I don't envy anyone doing it.",
        "Someone at the office brought homemade brownies, dangerous.",
        "I've been sleeping badly, too much screen time probably.",
        "The cat next door keeps sneaking into our shed.",
        "Sports on TV all weekend, I hid in the spare room with a book.",
        "I think I need new running shoes, these are falling apart.",
        "Presents for the holidays already? It feels too early.",
        "The train was cancelled so I worked from the café instead.",
        "My inbox is a disaster, I declared email bankruptcy.",
        "It's been ages since we had a proper catch-up, {other}.",
        "The power went out for an hour yesterday evening.",
        "I finally fixed the squeaky door, small victories.",
        "We had friends over for board games, I lost every round.",
        "Travel prices are absurd this year, did you notice?",
        "I'm trying to drink less coffee, going badly so far.",
        "The park was packed, everyone had the same idea.",
        "I watched a documentary about octopuses, fascinating creatures.",
        "My back is sore from sitting all day, I need a better chair.",
        "Do you still do that thing where you cook for the whole week on Sunday?",
        "I saw a fox in the street at midnight, just trotting along.",
        "The library has a book sale next month, I'll probably overspend.",
        "My brother keeps sending me memes at 2am.",
        "Learning something new every year is my resolution, we'll see.",
        "Family dinners are getting louder as the kids get older.",
        "I signed up for a newsletter and now I get five emails a day.",
        "The supermarket moved everything around again, total chaos.",
        "I'm in the mood for a long walk by the river.",
        "How is everyone at your place doing, {other}?",
    ),
    reactions=(
        "Ha, fair enough.",
        "Oh wow, {who}!",
        "That's brilliant.",
        "No way, really?",
        "Love that for you.",
        "Mm, I hear you.",
        "Good for you, {who}.",
        "Oh nice.",
    ),
    families=(
        Family(
            key="dog",
            values=(
                "Pippin",
                "Mango",
                "Bramble",
                "Nutmeg",
                "Tinker",
                "Marlowe",
                "Clementine",
                "Barnaby",
                "Wasabi",
                "Paprika",
            ),
            says=(
                "We drove out to the rescue place on Saturday and came home with a scruffy "
                "terrier. The kids insisted on calling him {value}.",
                "There's a wiry little lurcher asleep on my feet right now. {value}, meet "
                "the internet.",
            ),
            asks=(
                "What is the name of {who}'s new dog?",
                "What did {who} name the pet they adopted?",
            ),
            prompts=("Did you ever settle on a name for the new dog, {who}?",),
            replies=("{value}! The kids picked it.", "We went with {value} in the end."),
            corrections=(
                "Small update on the terrier: he answers to {value} now, {old} never stuck.",
            ),
            when_asks=("When did {who} adopt a dog?",),
            month_asks=("What name did {who} give the dog they got in {month}?",),
        ),
        Family(
            key="job",
            values=(
                "radiographer",
                "stonemason",
                "air traffic controller",
                "translator",
                "beekeeper",
                "veterinary nurse",
                "sound engineer",
                "park ranger",
            ),
            says=(
                "I signed on the dotted line this morning: I'm officially training as a {value}.",
                "Handed in my notice! Next chapter, {value}. Terrifying.",
            ),
            asks=(
                "What profession is {who} switching to?",
                "What kind of work will {who} be doing from now on?",
            ),
            prompts=("So what's the new job going to be, {who}?",),
            replies=("{value}. Still can't quite believe it.",),
            corrections=(
                "Plot twist, the {old} thing fell through. I took a role as a {value} after all.",
            ),
            when_asks=("When did {who} accept a new job?",),
            month_asks=("What work did {who} sign up for in {month}?",),
        ),
        Family(
            key="holiday",
            values=_CITIES,
            says=(
                "Flights are booked for the summer! Two whole weeks in {value}.",
                "I just paid the deposit on a little flat in {value} for August.",
            ),
            asks=(
                "Where is {who} going on vacation?",
                "Which destination did {who} pick for their summer travel?",
            ),
            prompts=("Where are you heading on holiday this year, {who}?",),
            replies=("{value}, if the airline doesn't go bust first.",),
            corrections=("Change of plan, {old} is off. We rebooked everything for {value}.",),
            when_asks=("When did {who} sort out their summer travel?",),
            month_asks=("Where did {who} decide to travel to in {month}?",),
        ),
        Family(
            key="instrument",
            values=(
                "cello",
                "banjo",
                "harp",
                "accordion",
                "clarinet",
                "mandolin",
                "trombone",
                "double bass",
            ),
            says=(
                "I've been practising the {value} every evening, the neighbours must hate me.",
                "Bought a second-hand {value} off a retired teacher, lessons start Monday.",
            ),
            asks=(
                "Which musical instrument is {who} learning?",
                "What does {who} play now?",
            ),
            prompts=("Are you still having music lessons? Which instrument was it, {who}?",),
            replies=("The {value}. Slowly getting less terrible.",),
            when_asks=("When did {who} start learning an instrument?",),
            month_asks=("Which instrument did {who} pick up in {month}?",),
        ),
        Family(
            key="vehicle",
            values=(
                "Volvo estate",
                "camper van",
                "Vespa",
                "cargo bike",
                "pickup truck",
                "Fiat Panda",
                "tandem",
            ),
            says=(
                "We finally traded in the old banger, there's a {value} sitting in the "
                "driveway now.",
            ),
            asks=("What vehicle did {who} buy?", "What does {who} drive these days?"),
            prompts=("What did you end up getting to replace the car, {who}?",),
            replies=("A {value}, don't laugh.",),
            corrections=("Returned the {old}, it was a lemon. Swapped it for a {value}.",),
            when_asks=("When did {who} replace their car?",),
        ),
        Family(
            key="sport",
            values=(
                "rowing",
                "fencing",
                "bouldering",
                "water polo",
                "archery",
                "roller derby",
                "kickboxing",
            ),
            says=("Joined a {value} club down the road, first session left me aching everywhere.",),
            asks=("What sport has {who} taken up?", "Which team activity does {who} do now?"),
            prompts=("What was that sport you were going to try, {who}?",),
            replies=("{value}! Tuesdays and Thursdays.",),
            when_asks=("When did {who} take up a new sport?",),
            month_asks=("Which sport did {who} try in {month}?",),
        ),
        Family(
            key="town",
            values=(
                "Harrowgate",
                "Millbrook",
                "Saltmarsh",
                "Kingsbridge",
                "Fernhill",
                "Ashcombe",
                "Wexley",
            ),
            says=("The removal van comes Friday, we've got a little terraced house in {value}.",),
            asks=("Which town is {who} relocating to?", "Where will {who} be living?"),
            prompts=("Where's the new place, {who}? Which part of the county?",),
            replies=("{value}, ten minutes from the station.",),
            corrections=("The {old} sale collapsed. We're buying in {value} instead.",),
            when_asks=("When did {who} arrange their move?",),
        ),
        Family(
            key="allergy",
            values=("walnuts", "shellfish", "sesame", "strawberries", "mustard", "lupin"),
            says=(
                "Turns out I react badly to {value}, the doctor confirmed it with a skin "
                "prick test.",
            ),
            asks=(
                "What is {who} allergic to?",
                "Which food should {who} avoid for medical reasons?",
            ),
            prompts=("What did the allergy test say in the end, {who}?",),
            replies=("{value}, of all things.",),
            when_asks=("When did {who} find out about a food allergy?",),
        ),
        Family(
            key="gift",
            values=(
                "telescope",
                "hammock",
                "polaroid camera",
                "record player",
                "espresso machine",
                "pottery wheel",
                "kayak",
            ),
            says=(
                "For our anniversary he surprised me with a {value}, I nearly cried.",
                "My parents clubbed together and got me a {value} for my birthday!",
            ),
            asks=("What present did {who} receive?", "What was {who} given recently?"),
            prompts=("What did you get for your birthday in the end, {who}?",),
            replies=("A {value}! Totally unexpected.",),
            when_asks=("When did {who} get a special present?",),
            month_asks=("What gift did {who} get in {month}?",),
        ),
        Family(
            key="novel",
            values=(
                "The Salt Road",
                "Lanterns at Dusk",
                "The Ninth Orchard",
                "A Winter Ledger",
                "Glass Cathedral",
                "The Hollow Year",
            ),
            says=("I stayed up until 3am finishing {value}, that ending wrecked me.",),
            asks=(
                "Which book did {who} read recently?",
                "What novel kept {who} awake at night?",
            ),
            prompts=("What are you reading at the moment, {who}?",),
            replies=("{value}. Cannot put it down.",),
            month_asks=("Which book did {who} finish in {month}?",),
        ),
        Family(
            key="course",
            values=(
                "Portuguese",
                "pastry",
                "first aid",
                "welding",
                "sign language",
                "astronomy",
            ),
            says=("Passed the {value} course with distinction, the certificate is on the fridge.",),
            asks=("What class did {who} complete?", "What did {who} get a qualification in?"),
            prompts=("Which evening class were you doing again, {who}?",),
            replies=("{value}. Exam's next week.",),
            when_asks=("When did {who} finish a course?",),
            month_asks=("Which course did {who} pass in {month}?",),
        ),
        Family(
            key="baby",
            values=("Aurelio", "Maisie", "Teodor", "Wilhelmina", "Caspian", "Ottilie"),
            says=("My sister had the baby at 4am, a little girl, and they went with {value}.",),
            asks=(
                "What is the name of {who}'s niece?",
                "What did {who}'s sister call her newborn?",
            ),
            prompts=("Has your sister picked a name for the baby yet, {who}?",),
            replies=("{value}. Gorgeous, right?",),
            when_asks=("When was {who}'s niece born?",),
        ),
    ),
    hop=Hop(
        relations=("cousin", "godmother", "flatmate", "stepbrother", "aunt", "brother-in-law"),
        intros=(
            "My {relation} {person} is staying with us this week, lovely but chaotic.",
            "Had lunch with my {relation} {person} today, we hadn't talked properly in years.",
        ),
        attributes=(
            HopAttribute(
                values=(
                    "Reykjavik",
                    "Montevideo",
                    "Aarhus",
                    "Bilbao",
                    "Wellington",
                    "Gdansk",
                    "Ottawa",
                ),
                says=("{person} told me over breakfast that they're moving to {value} for good.",),
                asks=("In which city will {who}'s {relation} settle?",),
            ),
            HopAttribute(
                values=("midwife", "locksmith", "cartographer", "sommelier", "glassblower"),
                says=("{person} finally got the offer, they'll be working as a {value}.",),
                asks=("What job did {who}'s {relation} land?",),
            ),
            HopAttribute(
                values=("parrot", "tortoise", "ferret", "axolotl", "chinchilla"),
                says=("{person} turned up with a {value} in a box, as you do.",),
                asks=("What animal does {who}'s {relation} keep?",),
            ),
        ),
    ),
)
