"""The embedder a run's settings describe: what clients embed with, and the server alike.

The server's DP mechanism (and anything else that must embed exactly as the clients do)
builds it here, from the same settings, so neither side imports the other.
"""

from __future__ import annotations

from ripple_flwr.data.registry import embed_size_of
from ripple_flwr.settings import RunSettings
from ripple_flwr.wst.embedder import PrototypeSettings, SpectralEmbedder


def run_embed_size(settings: RunSettings) -> int:
    """The side a run's WST embeds at: ``embed-size``, else the dataset's (64 for the photo
    sets), else 0 (the images' own size; always so for local data unless set)."""
    if settings.embedding.embed_size:
        return settings.embedding.embed_size
    if settings.data.client_data == "local":
        return 0
    return embed_size_of(settings.data.base_dataset) or 0


def embedder_key(settings: RunSettings, image_shape: tuple[int, int, int]) -> tuple:
    """What the embedder depends on: equal keys, equal embeddings."""
    side = run_embed_size(settings) or None
    return (
        tuple(image_shape),
        settings.embedding.J,
        settings.embedding.L,
        settings.embedding.svd_rank,
        settings.embedding.explained_variance,
        side,
    )


def run_embedder(settings: RunSettings, image_shape: tuple[int, int, int]) -> SpectralEmbedder:
    """A new embedder for the run's scattering (J, L), prototype (M or rho) and embed size.

    Parameters
    ----------
    settings : RunSettings
        The run's settings.
    image_shape : tuple of int
        (C, H, W) of the images it embeds.
    """
    return SpectralEmbedder(
        tuple(image_shape),
        J=settings.embedding.J,
        L=settings.embedding.L,
        prototype=PrototypeSettings(
            settings.embedding.svd_rank, settings.embedding.explained_variance_or_none
        ),
        device="auto",
        embed_size=run_embed_size(settings) or None,
    )
