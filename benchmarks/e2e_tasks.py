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
