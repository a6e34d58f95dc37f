# The Northwind task as a script in the style of Anthropic's programmatic tool calling: each tool is a
# top-level `async def name(args: dict) -> str` returning JSON text. Runs unchanged with [tools] call_style = "ptc"
# (ptc.toml):  cellgate exec --config ptc.toml ptc_script.py   (every call gated and recorded)
import asyncio, json

rows = json.loads(await list_orders({"month": "2026-10"}))
late = [r for r in rows if r["carrier"] == "NorthPost" and r["days_late"] > 5]
tasks = await asyncio.gather(*[create_task({"order_id": r["order_id"], "kind": "follow_up"}) for r in late])
assert all(json.loads(t)["kind"] == "follow_up" for t in tasks)
print(len(rows), len(late))
