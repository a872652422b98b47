"""Differential privacy for the one-shot embedding (the paper's stated future work).

Why: the embedding Phi is the only thing a Ripple client ever sends about
its data outside training, and it is sent in the clear. The Gaussian
mechanism below makes that one release (epsilon, delta)-differentially
private before it leaves the device; the server routes the noisy vector
exactly as it routes a clean one (post-processing cannot weaken the
guarantee).

The guarantee, and what it assumes:

- **Unit of privacy: the client's whole dataset.** The embedding is a
  function of the whole local dataset (a spectral prototype, then the WST),
  and one image can move the prototype's principal components arbitrarily,
  so no per-image bound smaller than the clip is known. Clipping to L2 norm
  ``clip`` bounds the distance between the released vectors of *any* two
  datasets by ``2 * clip``, so the sensitivity is ``2 * clip`` under
  replace-one-dataset adjacency (which implies replace-one-image).
- **One release.** The client sends its embedding once per run. Sending it
  again (another run, a late re-join) composes: k releases at (eps, delta)
  each cost at most (k * eps, k * delta).
- **The clip bound, the scale and the seed are not data-dependent.** They
  must be fixed before the client looks at its data (e.g. chosen by the
  server from its own auxiliary set); ``rng`` must be a fresh, secret
  generator on the device (a seeded one is for tests and benchmarks only).
- Floating-point caveats of the textbook Gaussian mechanism apply (no
  discrete sampler).
- **Scope: the embedding only.** The model updates a client returns in the
  training rounds are not privatised here.

Space: the clipping and the noise act on the embedding the client sends
(raw scattering coefficients). Optionally, and only with public values
(computed by the server from its own auxiliary set, never from this
client), the client first maps it to u = (Phi - center) / scale (after the
GMM-VAE's signed log1p with ``log_space``), projects u on the orthonormal
columns of ``basis`` (P x r), clips and noises those r coordinates, and maps
the result back into the embedding's space (through ``lift``, then the
inverse log1p). The GMM-VAE applies signed log1p and a per-feature
standardisation *inside* the model; that, like the map back, is
post-processing of the released vector, so the guarantee holds for any
public center, scale, basis and lift, and the server routes the result
unchanged. They only decide where the budget goes:
raw coefficients spend the clip on the mean all clients share (the
order-0 coefficients dominate the norm), and isotropic noise in P = 1,953
dimensions has a norm about sqrt(P) times its per-coordinate sigma; a
center removes the shared part, a scale evens out the features, and a basis
of r << P directions leaves noise of norm sigma * sqrt(r).

Calibration: the analytic Gaussian mechanism (Balle and Wang, ICML 2018,
Theorem 8), the smallest sigma for which the privacy-loss bound holds
exactly; valid for every epsilon > 0, unlike the classic
sigma = sqrt(2 ln(1.25/delta)) * Delta / epsilon, which needs epsilon <= 1
and is looser.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "analytic_gaussian_delta",
    "check_dp_params",
    "classic_gaussian_sigma",
    "clip_l2",
    "gaussian_sigma",
    "privatize_embedding",
    "reference_projection",
]


# exp(80) ~ 5.5e34 < float32 max ~ 3.4e38.
_LOG_CAP = 80.0


def check_dp_params(epsilon: float | None, delta: float, clip: float) -> None:
    """Raise ValueError naming the bad setting (epsilon None or inf = no privacy)."""
    if epsilon is not None:
        if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)):
            raise ValueError(f"embedding-dp-epsilon must be a number, got {epsilon!r}")
        if math.isnan(epsilon) or epsilon <= 0:
            raise ValueError(
                f"embedding-dp-epsilon must be > 0 (inf or none = no noise), got {epsilon!r}"
            )
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise ValueError(
            f"embedding-dp-delta must lie in (0, 1) (e.g. 1e-5, below 1 / number of "
            f"clients), got {delta!r}"
        )
    if (
        isinstance(clip, bool)
        or not isinstance(clip, (int, float))
        or not math.isfinite(clip)
        or clip <= 0
    ):
        raise ValueError(f"embedding-dp-clip must be a finite L2 norm > 0, got {clip!r}")


def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float) -> float:
    """The smallest delta for which N(0, sigma^2) noise is (epsilon, delta)-DP.

    Balle and Wang (2018), Theorem 8: delta = Phi(a) - e^eps Phi(b) with
    a = Delta/(2 sigma) - eps sigma/Delta and b = -Delta/(2 sigma) - eps sigma/Delta,
    computed in log space so that large epsilon does not overflow.
    """
    if sigma <= 0:
        return 1.0
    from scipy.special import log_ndtr  # 0.25 s to import: only a DP release needs it

    r = sensitivity / sigma
    a = r / 2 - epsilon / r
    b = -r / 2 - epsilon / r
    log_pa = float(log_ndtr(a))
    log_ratio = epsilon + float(log_ndtr(b)) - log_pa
    if log_ratio >= 0:  # only rounding can get here; the true difference is >= 0
        return 0.0
    return float(math.exp(log_pa) * -math.expm1(log_ratio))


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """sigma = sqrt(2 ln(1.25/delta)) Delta / epsilon (Dwork and Roth, Thm A.1; eps <= 1)."""
    check_dp_params(epsilon, delta, 1.0)
    if epsilon > 1:
        raise ValueError(
            f"the classic Gaussian calibration holds only for epsilon <= 1, got {epsilon}; "
            "use gaussian_sigma (analytic)"
        )
    return math.sqrt(2 * math.log(1.25 / delta)) * sensitivity / epsilon


def gaussian_sigma(epsilon: float | None, delta: float, sensitivity: float) -> float:
    """Noise std of the analytic Gaussian mechanism for one (epsilon, delta) release.

    ``epsilon`` None or inf gives 0 (no noise). The bound is found by bisection
    on log(sigma) to a relative precision of 1e-12; the returned sigma always
    satisfies the bound (it is the upper end of the final bracket).
    """
    check_dp_params(epsilon, delta, 1.0)
    if not math.isfinite(sensitivity) or sensitivity <= 0:
        raise ValueError(f"sensitivity must be a finite number > 0, got {sensitivity!r}")
    if epsilon is None or math.isinf(epsilon):
        return 0.0
    lo, hi = sensitivity * 1e-6, sensitivity
    while analytic_gaussian_delta(hi, epsilon, sensitivity) > delta:
        lo, hi = hi, hi * 2
    while analytic_gaussian_delta(lo, epsilon, sensitivity) <= delta:
        lo /= 2
    while hi / lo > 1 + 1e-12:
        mid = math.sqrt(lo * hi)
        if analytic_gaussian_delta(mid, epsilon, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def clip_l2(x: np.ndarray, clip: float) -> np.ndarray:
    """``x`` scaled down to L2 norm ``clip`` if it is longer (float64 copy); rows if 2-D."""
    check_dp_params(None, 0.5, clip)
    arr = np.array(x, dtype=np.float64, copy=True)
    if not np.all(np.isfinite(arr)):
        raise ValueError("cannot clip an embedding that contains NaN or Inf")
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    factor = np.minimum(1.0, clip / np.maximum(norms, np.finfo(np.float64).tiny))
    return arr * factor


def _public_frame(
    p: int,
    center: np.ndarray | None,
    scale: np.ndarray | None,
    basis: np.ndarray | None,
    lift: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """The mechanism's public centre, scale, basis and lift for ``p`` features, checked."""
    c = np.zeros(p) if center is None else np.asarray(center, dtype=np.float64)
    if c.shape != (p,) or not np.all(np.isfinite(c)):
        raise ValueError(f"center must be ({p},) finite values, got shape {c.shape}")
    s = np.ones(p) if scale is None else np.asarray(scale, dtype=np.float64)
    if s.shape != (p,) or not np.all(np.isfinite(s)) or np.any(s <= 0):
        raise ValueError(f"scale must be ({p},) finite values > 0, got shape {s.shape}")
    if basis is not None:
        basis = np.asarray(basis, dtype=np.float64)
        if basis.ndim != 2 or basis.shape[0] != p or basis.shape[1] < 1:
            raise ValueError(f"basis must be ({p}, r) with r >= 1, got shape {basis.shape}")
        if not np.allclose(basis.T @ basis, np.eye(basis.shape[1]), atol=1e-6):
            raise ValueError("basis columns must be orthonormal (e.g. from np.linalg.qr or svd)")
        lift = basis if lift is None else np.asarray(lift, dtype=np.float64)
        if lift.shape != basis.shape or not np.all(np.isfinite(lift)):
            raise ValueError(f"lift must be {basis.shape} finite values, got shape {lift.shape}")
    elif lift is not None:
        raise ValueError("lift maps basis coordinates back; give a basis with it")
    return c, s, basis, lift


def privatize_embedding(
    embedding: np.ndarray,
    epsilon: float | None,
    delta: float,
    clip: float,
    rng: np.random.Generator,
    *,
    center: np.ndarray | None = None,
    scale: np.ndarray | None = None,
    basis: np.ndarray | None = None,
    lift: np.ndarray | None = None,
    log_space: bool = False,
) -> np.ndarray:
    """The client's embedding after the Gaussian mechanism, ready to send (float32).

    ``embedding``: the (P,) vector the client would send (or (B, P), one
    release per row). ``epsilon`` None or inf returns the embedding unchanged
    (as float32). Otherwise u = (embedding - center) / scale (defaults 0 and
    1), z = u @ basis (default: z = u), z is clipped to L2 norm ``clip``,
    N(0, sigma^2 I) with sigma from :func:`gaussian_sigma` at sensitivity
    ``2 * clip`` is added, and center + scale * (z @ lift.T) is returned
    (``lift`` defaults to ``basis``: an orthogonal projection; see
    :func:`reference_projection` for a better one). ``center`` (P,), ``scale``
    (P,) > 0, ``basis`` (P, r) with orthonormal columns and ``lift`` (P, r)
    must be public: fixed without looking at this client's data.
    ``log_space``: apply signed log1p first and its inverse last, so that with
    the GMM-VAE's own ``feature_mean`` / ``feature_std`` as center and scale
    the mechanism acts exactly on the vector the model reads (the inverse is
    capped at |log1p| = 80 to stay finite in float32).
    """
    check_dp_params(epsilon, delta, clip)
    x = np.asarray(embedding)
    if x.ndim not in (1, 2) or x.shape[-1] == 0:
        raise ValueError(f"embedding must have shape (P,) or (B, P), got {x.shape}")
    if epsilon is None or math.isinf(epsilon):
        return np.array(x, dtype=np.float32, copy=True)
    c, s, basis, lift = _public_frame(x.shape[-1], center, scale, basis, lift)
    xs = np.asarray(x, dtype=np.float64)
    if log_space:
        xs = np.sign(xs) * np.log1p(np.abs(xs))
    u = (xs - c) / s
    z = clip_l2(u if basis is None else u @ basis, clip)
    sigma = gaussian_sigma(epsilon, delta, 2.0 * clip)
    z = z + rng.normal(0.0, sigma, size=z.shape)
    noisy = c + s * (z if lift is None else z @ lift.T)
    if log_space:
        noisy = np.sign(noisy) * np.expm1(np.minimum(np.abs(noisy), _LOG_CAP))
    # float32 overflow would make the server reject the reply as non-finite.
    big = float(np.finfo(np.float32).max)
    return np.clip(noisy, -big, big).astype(np.float32)


def reference_projection(
    reference: np.ndarray, targets: np.ndarray, ridge: float = 10.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Public ``(mean, basis, lift)`` from the server's labelled reference clients.

    ``reference`` (N, P): the server's synthetic clients in the space the
    mechanism works in (e.g. the GMM-VAE's normalised input); ``targets``
    (N, K): their mixtures. ``basis`` spans the ridge-regression directions
    that predict the mixture (r <= K - 1 orthonormal columns), so the clip and
    the noise are spent on what routing reads. ``lift`` maps r coordinates back
    to the conditional mean of the whole vector under the reference's
    covariance, Sigma B (B^T Sigma B)^-1, which keeps the released vector
    where the router was trained (an orthogonal projection does not).
    """
    x = np.asarray(reference, dtype=np.float64)
    y = np.asarray(targets, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or len(x) < 2:
        raise ValueError(
            f"reference (N, P) and targets (N, K) need the same N >= 2, got {x.shape}, {y.shape}"
        )
    if not ridge > 0:
        raise ValueError(f"ridge must be > 0, got {ridge}")
    mean = x.mean(axis=0)
    xc, yc = x - mean, y - y.mean(axis=0)
    # Ridge in its dual form: an N x N solve, whatever P is.
    coef = xc.T @ np.linalg.solve(xc @ xc.T + ridge * np.eye(len(x)), yc)
    u, sv, _ = np.linalg.svd(coef, full_matrices=False)
    keep = sv > sv.max() * 1e-8 if sv.size and sv.max() > 0 else np.zeros(0, bool)
    if not np.any(keep):
        raise ValueError("the reference does not predict the targets (all coefficients are 0)")
    basis = u[:, keep]
    cov_b = xc.T @ (xc @ basis) / (len(x) - 1)  # Sigma B without the P x P matrix
    lift = cov_b @ np.linalg.inv(basis.T @ cov_b)
    return mean, basis, lift
