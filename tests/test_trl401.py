"""TRL401 beyond the fixtures: how the headline and the fix name the value that carries the
graph."""

from __future__ import annotations

import textwrap

from fixture_support import lint

VALIDATION = '''
import torch


def evaluate(net, dataloader, criterion):
    mae_loss = torch.nn.L1Loss()
    total_loss, total_mae = 0.0, 0.0
    for step, (users, items, ratings) in enumerate(dataloader):
        predictions = net(users, items)
        loss = criterion(predictions, ratings)
        total_loss += loss.item()
        total_mae += mae_loss(predictions, ratings.type(torch.FloatTensor).to("cpu"))
    print(f"MAE {total_mae / (step + 1):.3f}")
    return total_loss / (step + 1)
'''


def test_a_long_call_is_named_by_its_function_not_by_another_variable(tmp_path):
    # `loss` is a variable of the loop: naming the L1 term `loss` would point at the wrong value
    path = tmp_path / "evaluate.py"
    path.write_text(textwrap.dedent(VALIDATION))
    result = lint([path], ["TRL401"])
    [finding] = [d for d in result.diagnostics if d.code == "TRL401"]
    assert finding.message.endswith("alive through `mae_loss(...)`"), finding.message
    assert finding.fix is not None and "`mae_loss(...).detach()`" in finding.fix.message
