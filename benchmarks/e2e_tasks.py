"""The three tasks of the end-to-end benchmark (benchmarks/e2e.py) and the demo: a code edit
whose output repeats much of the prompt, a summary of a passage given in the prompt, and an
open-ended question whose answer repeats little."""
from __future__ import annotations

CODE = '''def summarize_orders(orders, customers, since=None, currency="EUR", rates=None):
    """Totals per customer of the orders placed since a date, in one currency."""
    rates = rates or {}
    totals = {}
    skipped = []
    for order in orders:
        if since is not None and order["date"] < since:
            continue
        customer = customers.get(order["customer_id"])
        if customer is None:
            skipped.append(order["id"])
            continue
        amount = order["amount"]
        if order["currency"] != currency:
            rate = rates.get((order["currency"], currency))
            if rate is None:
                skipped.append(order["id"])
                continue
            amount = amount * rate
        entry = totals.setdefault(customer["name"], {"count": 0, "amount": 0.0})
        entry["count"] += 1
        entry["amount"] += amount
    ranked = sorted(totals.items(), key=lambda item: item[1]["amount"], reverse=True)
    lines = []
    for name, entry in ranked:
        lines.append(f"{name}: {entry['count']} orders, {entry['amount']:.2f} {currency}")
    if skipped:
        lines.append(f"skipped {len(skipped)} orders: " + ", ".join(str(i) for i in skipped))
    return "\\n".join(lines)
'''

PASSAGE = """The lighthouse on the northern cape was built in 1871 after three ships were lost on the
reef within a single winter. Its first keeper, a former ship's carpenter named Elias Brand,
lived in the tower with his wife and two children and kept a log of every vessel that passed.
The light was fuelled by whale oil until 1894, when a paraffin lamp replaced it, and the lens,
made in Paris, could be seen from twenty-two nautical miles on a clear night. In 1923 a storm
destroyed the keeper's cottage and the family moved to the village, rowing out each evening
to light the lamp until a new cottage was finished two years later. The light was electrified
in 1952 and made fully automatic in 1978, when the last keeper left. Today the tower belongs
to a local trust that opens it to visitors in summer; the original lens is kept in the
village museum, beside Brand's logbooks, which record more than forty thousand passing ships
and eleven rescues in which the keeper's family took part."""

TASKS = {
    "code edit": (
        "Rewrite the following Python function with type hints on every parameter and on the "
        "return value. Keep the body exactly the same.\n\n```python\n" + CODE + "```\n\n"
        "The same function with type hints:\n\n```python\n"),
    "summary": (
        "Read the passage and then summarize it in a few sentences, keeping the names, dates "
        "and figures.\n\nPassage:\n" + PASSAGE + "\n\nSummary of the passage:\n"),
    "open question": (
        "Question: Why do many people find it easier to learn a new skill by practising a "
        "little every day rather than a lot once a week? Explain in a few paragraphs.\n\n"
        "Answer:"),
}

CHATML = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n{}<|im_end|>\n" \
         "<|im_start|>assistant\n"


def prompt_ids(llm, task: str, chat: bool):
    """The task's prompt as token ids for a llama.cpp model (ChatML for instruct models)."""
    text = TASKS[task]
    if chat:
        return llm.tokenize(CHATML.format(text).encode(), add_bos=False, special=True)
    return llm.tokenize(text.encode(), add_bos=True, special=False)


# Multi-request workloads (benchmarks/e2e_multi.py, the demo's session): several requests of
# one kind, sent one after another by the same process, each prompt starting with the text the
# workload's requests share (instructions, schema, examples), so that a user's process keeps
# that prefix's KV cache from one request to the next.

EXTRACTION_HEAD = """Extract the order details from the customer message as one line of JSON with exactly these
fields: "customer" (string), "product" (string), "quantity" (integer), "city" (string),
"urgent" (true or false). Answer with the JSON only.

Message: Hi, this is Maria Lopez. Please send 3 boxes of the oak floor tiles to our shop in
Valencia. No rush, next month is fine.
JSON: {"customer": "Maria Lopez", "product": "oak floor tiles", "quantity": 3, "city": "Valencia", "urgent": false}

Message: Tom Becker here, we need 12 packs of copper wire delivered to Hamburg by tomorrow
morning, the site is waiting!
JSON: {"customer": "Tom Becker", "product": "copper wire", "quantity": 12, "city": "Hamburg", "urgent": true}

"""

EXTRACTION_RECORDS = [
    "Good morning, my name is Aiko Tanaka. Could you ship 5 rolls of insulation foam to Osaka? "
    "Whenever it suits you.",
    "This is Pierre Dubois from the Lyon office. We urgently need 40 ceiling panels, the "
    "renovation starts on Monday.",
    "Hello, Sarah Olsen speaking. I would like to order 2 cast iron radiators for my flat in "
    "Bergen, no hurry at all.",
    "Rahul Mehta, Pune branch: please dispatch 25 bags of quick-set cement today, the crew is "
    "idle until it arrives.",
    "Hi there, Lukas Novak. Send 7 brass door handles to Prague please, there is no deadline.",
    "Emergency from Chen Wei in Shenzhen: 60 steel brackets needed by tonight or the line stops.",
    "Dear team, Olga Ivanova would like 4 packs of wall primer delivered to Tallinn some time "
    "next week.",
    "It's Diego Santos, Porto. We need 15 sheets of marine plywood as fast as possible, the "
    "boat is due out on Friday.",
]

AGENT_HEAD = """You are a coding agent working in the repository of a small web service. You act only through
tool calls, one per answer, written as a JSON object on one line followed by the file:
{"tool": "write_file", "path": "<path>"} and then the complete new content of the file in a
```python block. Always write the whole file, changing only what the instruction asks.

"""

_SETTINGS = [
    ('HOST', '"0.0.0.0"'), ('PORT', '8080'), ('DEBUG', 'False'), ('WORKERS', '4'),
    ('TIMEOUT_SECONDS', '30'), ('DATABASE_URL', '"postgresql://app@db/app"'), ('CACHE_TTL', '300'),
    ('LOG_LEVEL', '"info"'),
]


def _settings_file(values):
    body = "\n".join(f"{k} = {v}" for k, v in values)
    return f'"""Settings of the web service, read once at start-up."""\nimport os\n\n{body}\n'


def _agent_requests():
    # Each request: the file as the previous step left it and one small change to make; the
    # expected answer is a tool call re-emitting the whole file with that change.
    values = list(_SETTINGS)
    changes = [
        ("PORT", "9090", "Change the port to 9090."),
        ("WORKERS", "8", "Use 8 workers instead of 4."),
        ("DEBUG", 'os.environ.get("APP_DEBUG") == "1"', "Read DEBUG from the APP_DEBUG environment "
         "variable (true when it is \"1\")."),
        ("TIMEOUT_SECONDS", "60", "Double the timeout."),
        ("CACHE_TTL", "600", "Keep cached entries for ten minutes."),
        ("LOG_LEVEL", '"warning"', "Only log warnings and errors."),
        ("HOST", '"127.0.0.1"', "Listen on localhost only."),
        ("DATABASE_URL", 'os.environ["DATABASE_URL"]', "Take the database URL from the environment "
         "variable of the same name."),
    ]
    requests = []
    for name, value, instruction in changes:
        requests.append(f"File app/settings.py:\n```python\n{_settings_file(values)}```\n\n"
                        f"Instruction: {instruction}\n\nTool call:\n")
        values = [(k, value if k == name else v) for k, v in values]
    return requests


WORKLOADS = {
    # ~60-token JSON answers to short records after a shared head (schema and two examples).
    "extraction": (EXTRACTION_HEAD, [f"Message: {r}\nJSON:" for r in EXTRACTION_RECORDS]),
    # Tool calls re-emitting a small file with one change each, after a shared system text.
    "agent loop": (AGENT_HEAD, _agent_requests()),
}


def workload_prompts(llm, workload: str, chat: bool):
    """A workload's prompts as token ids for a llama.cpp model, in request order (ChatML for
    instruct models; the shared head first in every prompt)."""
    head, requests = WORKLOADS[workload]
    if chat:
        return [llm.tokenize(CHATML.format(head + r).encode(), add_bos=False, special=True) for r in requests]
    return [llm.tokenize((head + r).encode(), add_bos=True, special=False) for r in requests]


def workload_texts(workload: str, chat: bool):
    """A workload's prompts as text (for a Hugging Face tokenizer), in request order."""
    head, requests = WORKLOADS[workload]
    return [CHATML.format(head + r) if chat else head + r for r in requests]
