"""pretrain_vae.py --aux-data: the standalone job pre-trains on the server's own folder and
writes the very checkpoint the in-run pre-training writes, which an own-data run accepts."""

from __future__ import annotations

import json

import torch
from silos import CLASSES, DigitPool, write_silo

from ripple_flwr.app.server.setup import checkpoint_cache_path, resolve_checkpoint
from ripple_flwr.cli import pretrain as pretrain_vae
from ripple_flwr.data.base import classes_hash
from ripple_flwr.router.pretrain import pretrain_settings_for
from ripple_flwr.settings import RunSettings

# A tiny budget: 100 synthetic clients of 5 images, 20 steps.
RUN = {
    "client_data": "local",
    "num_partitions": 3,
    "clients_per_round": 3,
    "num_components": 4,
    "aux_size": 40,
    "pretrain_bank_size": 100,
    "pretrain_steps": 20,
    "pretrain_client_size": 5,
}


def cli_args(settings: RunSettings, output, cache) -> list[str]:
    """The flags that give pretrain_vae.py the run's settings and in-run budget."""
    ps = pretrain_settings_for(settings)
    return [
        *("--aux-data", settings.data.aux_data, "--class-names", settings.data.class_names),
        *("--image-size", str(settings.data.image_size), "--channels", str(settings.data.channels)),
        *(
            "--embed-size",
            str(settings.embedding.embed_size),
            "-K",
            str(settings.embedding.num_components),
        ),
        *("--aux-size", str(settings.data.aux_size), "--seed", str(settings.training.seed)),
        *("--bank-size", str(ps.bank.num_clients), "--n-syn", str(ps.bank.client_size)),
        *("--steps", str(ps.train.steps), "--eval-every", str(ps.train.eval_every)),
        *("--heldout-clients", str(ps.heldout_clients), "--real-clients", str(ps.real_clients)),
        *("--device", "cpu", "--cache-dir", str(cache), "--output", str(output), "--no-progress"),
    ]


def test_standalone_and_in_run_pretraining_write_the_same_checkpoint(tmp_path):
    aux = write_silo(DigitPool(3), tmp_path / "server-aux", dict.fromkeys(CLASSES, 10))
    settings = RunSettings.of(
        **RUN, aux_data=str(aux), class_names=",".join(CLASSES), cache_dir=str(tmp_path / "c")
    )
    classes = classes_hash(CLASSES)

    # In the run: pre-trained on the folder and cached.
    ckpt, info = resolve_checkpoint(settings, (1, 28, 28), classes)
    assert info["source"] == "pretrained"
    in_run = torch.load(checkpoint_cache_path(settings), weights_only=True)

    # Standalone, with its own bank cache.
    out = tmp_path / "out" / "aux-vae.pt"
    assert pretrain_vae.main(cli_args(settings, out, tmp_path / "banks")) == 0
    alone = torch.load(out, weights_only=True)
    assert alone["settings"] == in_run["settings"]
    assert alone["settings"]["aux_data"] == str(aux)  # its source, as the run records it
    assert alone["settings"]["classes"] == classes
    assert alone["vae_config"] == in_run["vae_config"]
    for key in ("state_dict",):
        assert alone[key].keys() == in_run[key].keys()
        for name, tensor in alone[key].items():
            assert torch.equal(tensor, in_run[key][name]), name
    assert torch.equal(alone["component_means"], in_run["component_means"])
    assert json.loads(out.with_suffix(".json").read_text())["checkpoint"] == str(out)

    # An own-data run with checkpoint= that file takes it as its router.
    from_file = RunSettings.of(**{**RUN, "checkpoint": str(out)}, aux_data=str(aux))
    loaded, info = resolve_checkpoint(from_file, (1, 28, 28), classes)
    assert info == {"checkpoint": str(out.resolve()), "source": "config"}
    assert loaded.settings == ckpt.settings
