"""Checks dtrain's ResNets against torchvision (run by hand where torchvision is installed).

Loads the state dicts written by the hidden Catch2 case "[python]" of export_test.cpp into
torchvision.models.resnet{18,34,50} with strict=True, and compares eval-mode logits on the
same input.

    DTRAIN_EXPORT_DIR=/tmp/x build/tests/models_tests "[python]"
    python3 tests/models/check_torchvision.py /tmp/x
"""
import os
import sys

import torch
import torch.jit._pickle
import torchvision


def main(directory):
    # libtorch's pickler tags dicts with torch.jit._pickle.restore_type_tag, which
    # weights_only=True (torch.load's default from torch 2.6) allows only when listed.
    if hasattr(torch.serialization, "add_safe_globals"):
        torch.serialization.add_safe_globals([torch.jit._pickle.restore_type_tag])
    failures = 0
    for name in ("resnet18", "resnet34", "resnet50"):
        state = torch.load(os.path.join(directory, name + ".pt"))
        io = torch.load(os.path.join(directory, name + "_io.pt"))
        model = getattr(torchvision.models, name)(num_classes=1000)
        count = sum(p.numel() for p in model.parameters())
        model.load_state_dict(state, strict=True)
        model.eval()
        with torch.no_grad():
            logits = model(io["input"])
        error = (logits - io["logits"]).abs().max().item()
        scale = io["logits"].abs().max().item()
        ok = error <= 1e-4 * max(1.0, scale)
        failures += not ok
        print(f"{name}: {len(state)} keys, {count} parameters, max |logit diff| {error:.3g} "
              f"(max |logit| {scale:.3g}) {'ok' if ok else 'MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
