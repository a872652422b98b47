"""A run config as the app accepts it: settings parsed with every method's options, then
checked against what is registered (methods, datasets, models) before any expensive work.

:mod:`ripple_flwr.settings` parses types and ranges and knows nothing else; the
rules that need the registry or the data live here, and each method's own rules
live in its method class (``check_settings``).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from ripple_flwr.data import available_datasets, image_shape_of
from ripple_flwr.data.registry import dataset_spec, is_resizable, resizable_datasets
from ripple_flwr.methods import registry
from ripple_flwr.privacy.mechanism import check_dp_params
from ripple_flwr.router.run_embedding import run_embed_size
from ripple_flwr.runs.outputs import confined_cache_dir
from ripple_flwr.settings import ConfigError, RunSettings
from ripple_flwr.training.models import available_models
from ripple_flwr.wst.shapes import validate_scattering


def parse_run_config(run_config: Mapping[str, Any], *, method_rules: bool = True) -> RunSettings:
    """Flower's run config as checked settings; :class:`ConfigError` names the first problem.

    ``method_rules=False`` leaves out the method's own rules (its strategy's
    ``check_settings``): a client, which the server never messages before it has checked
    them, parses without importing a strategy.
    """
    settings = RunSettings.from_run_config(expand_preset(run_config), registry.all_options())
    check_run(settings, method_rules=method_rules)
    return settings


def expand_preset(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The run config with its method's ``preset`` (a named configuration) written out.

    A key the preset sets is set to its value; a key the run sets to another value than both
    the preset's and its default is refused in one line (a preset never overrides a choice
    the user made).
    """
    out = dict(run_config)
    name = str(out.get("preset", "none") or "none")
    if name == "none":
        return out
    method = str(out.get("method", RunSettings.__dataclass_fields__["method"].default))
    spec = registry.METHODS.get(method)
    presets = {} if spec is None else spec.presets
    if name not in presets:
        has = ", ".join(presets) or "none"
        owners = [m for m, s in registry.METHODS.items() if name in s.presets]
        where = f"read only by method {', '.join(owners)}" if owners else "no method has it"
        raise ConfigError(
            f"preset={name!r} is not a preset of method {method!r} (its presets: {has}); {where}"
        )
    defaults = {**_field_defaults(), **{o.key: o.default for o in registry.all_options()}}
    for key, value in presets[name].items():
        given = out.get(key, defaults.get(key))
        if key in run_config and given != value and given != defaults.get(key):
            raise ConfigError(
                f"preset={name!r} sets {key}={value!r}, the run sets {key}={given!r}: drop "
                f"{key} (or the preset) to run one of them"
            )
        out[key] = value
    return out


def settings_defaults() -> dict[str, Any]:
    """Every run-config key at its default (the run's settings and every method's options)."""
    return parse_run_config({}).to_dict()


# What the GMM-VAE router and its pre-training read: a method without a router reads none.
ROUTER_KEYS = (
    "router",
    "J",
    "L",
    "svd-rank",
    "explained-variance",
    "embed-size",
    "checkpoint",
    "pretrain-bank-size",
    "pretrain-steps",
    "pretrain-client-size",
)


@lru_cache(maxsize=1)
def _field_defaults() -> dict[str, Any]:
    """The settings groups' keys at their defaults (the registry's options aside)."""
    return RunSettings().to_dict()


def _readers(ok) -> str:
    names = [m for m, s in registry.METHODS.items() if ok(s)]
    return f"read only by method {', '.join(names)}"


def unread_keys(settings: RunSettings) -> dict[str, str]:
    """Keys set away from their default that this run does not read: key -> who reads them.

    A method's option under another method (``cluster-optimizer`` for FedAvg), a key its own
    method reads only under another setting (Ripple's ``strat-order`` with uniform
    sampling), the router's keys under a method that has none. (``sampling`` is not one:
    the baselines sample uniformly, so ``sampling = "uniform"`` describes them.)
    """
    spec = registry.get_method(settings.method)
    options = registry.all_options()  # read now: a method registered later has its options
    values = settings.to_dict()
    defaults = {**_field_defaults(), **{o.key: o.default for o in options}}
    own = {o.key for o in spec.options}
    unread: dict[str, str] = {}
    for opt in options:
        if opt.key not in own:
            unread[opt.key] = _readers(lambda s, k=opt.key: k in {o.key for o in s.options})
    if not spec.needs_router:
        unread.update({k: _readers(lambda s: s.needs_router) for k in ROUTER_KEYS})
    if settings.embedding.refine != "hdb":
        unread["min-cluster-size"] = "read only with refine='hdb' (Ripple-HDB)"
    if not settings.embedding.embedding_dp_epsilon:
        for key in ("embedding-dp-delta", "embedding-dp-clip"):
            unread[key] = "read only with embedding-dp-epsilon > 0"
    if spec.unread is not None:
        unread.update(spec.unread(settings))
    return {
        k: why for k, why in unread.items() if k in values and str(values[k]) != str(defaults[k])
    }


def unread_keys_of(run_config: Mapping[str, Any]) -> dict[str, str]:
    """:func:`unread_keys` of a raw run config; ``{}`` when it does not parse (checked later)."""
    try:
        settings = RunSettings.from_run_config(run_config, registry.all_options())
        registry.get_method(settings.method)
    except (ConfigError, KeyError):
        return {}
    return unread_keys(settings)


def check_read(settings: RunSettings) -> None:
    """Refuse a key set for a method that does not read it: the run would silently ignore it
    (and its results record a setting it never used)."""
    unread = unread_keys(settings)
    if unread:
        values = settings.to_dict()
        key = next(iter(unread))
        more = f" (also {', '.join(list(unread)[1:])})" if len(unread) > 1 else ""
        raise ConfigError(
            f"{key}={values[key]!r} is {unread[key]}; this run (method={settings.method!r}) "
            f"would ignore it{more}: remove it, or set what reads it"
        )


def _choice(key: str, value: str, allowed) -> None:
    if value not in allowed:
        raise ConfigError(f"{key}={value!r} is not one of {', '.join(allowed)}")


def check_run(settings: RunSettings, *, method_rules: bool = True) -> None:
    """Everything :class:`RunSettings` cannot know: the registry's, the data's, the methods'.

    ``method_rules=False``: all but the method's own rules (which import its strategy).
    """
    _choice("method", settings.method, tuple(registry.METHODS))
    spec = registry.get_method(settings.method)
    if settings.embedding.refine == "hdb" and not spec.routing_weights:
        with_w = [m for m, s in registry.METHODS.items() if s.routing_weights]
        raise ConfigError(
            f"refine='hdb' clusters Ripple's routing weights; method={settings.method!r} has "
            f"none. Use method={' or '.join(repr(m) for m in with_w)}, or refine='none'."
        )
    confined_cache_dir(settings)  # on the server and on every client, each by its own machine
    _choice("dataset", settings.data.dataset.strip().lower(), available_datasets())
    _choice("model", settings.training.model, available_models())
    for opt in spec.options:
        opt.check(opt.of(settings))
    check_read(settings)
    if method_rules:
        spec.check_settings(settings)
    if settings.embedding.embedding_dp_epsilon:
        _check_dp(settings, spec)
    _check_model(settings)
    if settings.data.client_data == "local":
        _check_local(settings, spec)
        return
    data = settings.data
    new_size = data.new_partition_size or data.partition_size
    needed = data.aux_size + data.num_partitions * data.partition_size + data.new_clients * new_size
    spec_of_data = dataset_spec(data.base_dataset)
    derived = data.dataset.strip().lower() != data.base_dataset
    if data.label_kind != "class" and not derived and spec_of_data is not None:
        if spec_of_data.domains is False:
            raise ConfigError(
                f"label-kind={data.label_kind!r} follows the images' domains, and "
                f"{data.base_dataset} has none: use label-kind='class', or the wrapped "
                f"'rotated-{data.base_dataset}' / 'permuted-{data.base_dataset}'"
            )
    known = spec_of_data.images if spec_of_data is not None else 0
    if known and needed > known:
        new = f"new-clients={data.new_clients} x new-partition-size={new_size}"
        raise ConfigError(
            f"{data.base_dataset} has {known} images: aux-size={data.aux_size} + "
            f"num-partitions={data.num_partitions} x partition-size={data.partition_size} + "
            f"{new} = {needed}"
        )
    base = settings.data.base_dataset
    fixed = image_shape_of(base)
    if settings.data.image_size and not is_resizable(base) and fixed is not None:
        raise ConfigError(
            f"image-size applies to {', '.join(resizable_datasets())} and local data; "
            f"{base} is {fixed[1]}x{fixed[2]} (got image-size={settings.data.image_size}; use 0)"
        )
    shape = image_shape_of(base, settings.data.image_size)
    if shape is not None:
        check_image_shape(settings, shape)


def _check_model(settings: RunSettings) -> None:
    if settings.training.pretrained and settings.training.model != "resnet18":
        raise ConfigError(
            "pretrained=true loads torchvision's ImageNet ResNet-18; "
            f"model={settings.training.model!r} "
            "has no pretrained weights. Use model='resnet18' or pretrained=false."
        )
    if settings.training.pretrained_weights and not settings.training.pretrained:
        raise ConfigError("pretrained-weights is set but pretrained=false; set pretrained=true")


def _check_local(settings: RunSettings, spec) -> None:
    """A run on the nodes' own files: what the server must hold for it."""
    if spec.needs_truth:
        raise ConfigError(
            f"method={settings.method!r} uses the clients' true mixtures, which only benchmark "
            "partitions have; with client-data='local' use method='ripple'"
        )
    if spec.needs_router and not settings.data.aux_data and not settings.pretraining.checkpoint:
        raise ConfigError(
            f"method={settings.method!r} routes with a GMM-VAE pre-trained on the server's D_aux; "
            "with client-data='local' set aux-data to the server's labelled files (or "
            "checkpoint to a pre-trained router)"
        )
    if settings.embedding.embedding_dp_epsilon and not settings.data.aux_data:
        raise ConfigError(
            "embedding-dp-epsilon calibrates its mechanism on the server's D_aux; with "
            "client-data='local' set aux-data"
        )
    if settings.data.image_size:
        side = settings.data.image_size
        check_image_shape(settings, (settings.data.channels or 3, side, side))


def _check_dp(settings: RunSettings, spec) -> None:
    if settings.data.partition_size_spread != 1:
        raise ConfigError(
            f"embedding-dp-epsilon={settings.embedding.embedding_dp_epsilon} is calibrated for "
            "clients "
            f"of partition-size images, but partition-size-spread="
            f"{settings.data.partition_size_spread} makes some smaller; set "
            "partition-size-spread = 1 with embedding DP"
        )
    try:
        check_dp_params(
            settings.embedding.embedding_dp_epsilon,
            settings.embedding.embedding_dp_delta,
            settings.embedding.embedding_dp_clip or 1.0,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from err
    if not spec.needs_router or settings.embedding.router != "gmm-vae":
        raise ConfigError(
            f"embedding-dp-epsilon={settings.embedding.embedding_dp_epsilon} protects the WST "
            "embedding, "
            f"which only methods with the gmm-vae router send; method={settings.method!r} "
            f"router={settings.embedding.router!r} sends none. Set embedding-dp-epsilon=0 or use "
            "method='ripple' with router='gmm-vae'."
        )


def check_image_shape(settings: RunSettings, image_shape: tuple[int, ...]) -> None:
    """Reject a scattering scale J too large for the embedded images (kymatio: 2**J < side).

    Only a method with a router computes the scattering; the others never read J.
    """
    if not registry.get_method(settings.method).needs_router:
        return
    try:
        validate_scattering(
            tuple(int(s) for s in image_shape),
            settings.embedding.J,
            settings.embedding.L,
            embed_size=run_embed_size(settings) or None,
        )
    except ValueError as err:
        raise ConfigError(str(err)) from err


def summary_kind(settings: RunSettings) -> str:
    """What a client sends in the one-shot round: ``embedding``, ``mean`` or ``none``."""
    if not registry.get_method(settings.method).needs_router:
        return "none"
    return "mean" if settings.embedding.router == "mean-unmixing" else "embedding"
