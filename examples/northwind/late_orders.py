# October's NorthPost orders more than five days late each get a follow-up task;
# only the two counts go back to the model.
orders = tools.list_orders("2026-10")
late = [o for o in orders if o["carrier"] == "NorthPost" and o["days_late"] > 5]
for order in late:
    tools.create_task(order["order_id"], "follow_up")
print(len(orders), len(late))
