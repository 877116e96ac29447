"""The parity gates: what each graph variant's figures (export.parity) must meet, and how the figures of several runs
(providers, text sets) merge into the worst.

The exact variants (fp32, fp32-opt) are held to a limit derived from the model, not to a tolerance. On the float64
texts (export.rounding: the parity texts, up to a budget of held float64 outputs), each output's max abs error
against a float64 run of the same eager model, on real tokens, may be at most ROUNDING_MULTIPLE times the error eager
float32 PyTorch itself makes there, plus ROUNDING_FLOOR times the output's scale (its largest |float64 value|, at
least 1):

    {output}_float64_error <= 8 x {output}_float64_eager_error + 1e-6 x max(1, {output}_float64_max_abs)

A right graph computes what eager float32 computes, in another order (other kernels, fused ops, another summation
order), so its rounding is of the kind and size eager float32's is; both grow with the states' magnitude and the
model's depth, and the limit grows with them: no model's size can fail a right graph, and nothing is tuned to one
model. A wrong graph (a swapped table, a norm off, a mask leaking) moves an output by far more than rounding does.
The floor covers outputs that eager float32 computes almost exactly (it can be 0 in float32 where the graph, summing
in another order, is not). The attention probabilities get the same rule, their own float32 error. docs/export.md
("The exact gates") has the figures of the test models and of all-mpnet-base-v2, right graphs and wrong ones.

The other variants change the numbers on purpose and keep fixed gates (GATES: a cosine, label agreement, each a
minimum).
"""

from __future__ import annotations

EXACT_VARIANTS = ("fp32", "fp32-opt")
ROUNDING_MULTIPLE = 8.0  # times eager float32's own error against float64
ROUNDING_FLOOR = 1e-6  # times the output's scale: max(1, its largest |float64 value|)
# The exact gate's figures per output: the graph's error against float64, eager float32's, the scale, the limit.
ERROR, EAGER, SCALE, LIMIT = "_float64_error", "_float64_eager_error", "_float64_max_abs", "_float64_limit"
FLOAT64_FIGURES = (ERROR, EAGER, SCALE, LIMIT)
# variant -> {figure: its minimum}, for the variants that change the numbers
GATES: dict[str, dict[str, float]] = {
    "fp16": {"embeddings_min_cosine": 0.999, "token_embeddings_min_cosine": 0.999},
    "int8": {"embeddings_min_cosine": 0.99, "label_agreement": 0.99},
    "int8-dynamic": {"embeddings_min_cosine": 0.99, "label_agreement": 0.99},
}


def exact_limit(figures: dict[str, float], output: str) -> float:
    """What `output`'s float64 error may reach: ROUNDING_MULTIPLE x eager float32's + ROUNDING_FLOOR x its scale."""
    return ROUNDING_MULTIPLE * figures[output + EAGER] + ROUNDING_FLOOR * max(1.0, figures[output + SCALE])


def gate_failures(variant: str, measured: dict[str, float]) -> list[str]:
    """Human-readable misses, e.g. 'embeddings_min_cosine 0.98 < 0.99' or, for an exact variant,
    'token_embeddings_float64_error 0.031 > 4.1e-05 (8 x eager float32's 5e-06 + 1e-06 x 1.3)'."""
    if variant in EXACT_VARIANTS:
        return exact_failures(measured)
    return [f"{figure} {measured[figure]:.4g} < {minimum:.4g}" for figure, minimum in GATES[variant].items()
            if figure in measured and not measured[figure] >= minimum]


def exact_failures(measured: dict[str, float]) -> list[str]:
    """The exact rule's misses (module docstring); no float64 figures at all is a miss too, not a pass."""
    outputs = [key.removesuffix(ERROR) for key in measured if key.endswith(ERROR)]
    if not outputs:
        return ["no float64 figures (the exact gate compares with a float64 run of the model: export.rounding)"]
    misses = []
    for output in outputs:
        error, limit = measured[output + ERROR], exact_limit(measured, output)
        if not error <= limit:
            eager, scale = measured[output + EAGER], max(1.0, measured[output + SCALE])
            misses.append(f"{output}{ERROR} {error:.4g} > {limit:.4g} ({ROUNDING_MULTIPLE:g} x eager float32's "
                          f"{eager:.3g} + {ROUNDING_FLOOR:g} x {scale:.3g})")
    return misses


def merge_worst(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """The worse of each figure in either (the larger diff or scale, the smaller cosine or agreement); an output's
    float64 figures are taken together, from the one whose error is the larger share of its limit."""
    out = {**a, **b}
    for key in a.keys() & b.keys():
        out[key] = max(a[key], b[key]) if key.endswith(("diff", "max_abs")) else min(a[key], b[key])
    for output in {key.removesuffix(ERROR) for key in a.keys() & b.keys() if key.endswith(ERROR)}:
        worse = a if _share(a, output) >= _share(b, output) else b
        out |= {output + suffix: worse[output + suffix] for suffix in FLOAT64_FIGURES if output + suffix in worse}
    return out


def _share(figures: dict[str, float], output: str) -> float:
    return figures[output + ERROR] / exact_limit(figures, output)


def reported(variant: str, key: str) -> bool:
    """An exact variant reports its diffs from eager float32, their scales and its float64 figures; the others their
    agreement."""
    if variant in EXACT_VARIANTS:
        return key.endswith(("max_abs_diff", "max_abs", *FLOAT64_FIGURES))
    return key.endswith("min_cosine") or key == "label_agreement"
