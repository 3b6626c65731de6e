"""Attributions on the V2 protocol: two request parameters and two outputs.

    parameters  attribution         string  none, occlusion or shapley (engine/request/attribution.py)
                attribution_budget  int     shapley: coalitions per text (0: the server's default)
                attribution_label   string  the label explained (a multi-label model scores each
                                            label on its own); absent: each text's own label
    outputs     ATTRIBUTION         FP32   [-1, -1]  per token of each text, padded with zeros to the
                                                     request's longest text, as ATTENTION is
                ATTRIBUTION_ROWS    INT32  [-1]      the forward rows each text's attribution took

The `attribution` parameter decides whether anything is computed: a request that names
ATTRIBUTION or ATTRIBUTION_ROWS without a method gets them empty ([B, 0], and 0 rows per
text), for nothing, as clients that ask for every declared output (perf_analyzer) must not
pay a forward row per word of every text unawares (the outputs are built in reply.py). A
request that names no outputs gets every declared output, these two only when its parameter
names a method. The parameters sit on the request, not on an output: tritonclient sets no
parameters per output.
"""

from __future__ import annotations

from collections.abc import Mapping

from attnserve.service.api.v2.types import InferRequest, TensorDecl
from attnserve.service.common.vocabulary import Attribution
from attnserve.service.edges import parse_word, quote
from attnserve.service.engine.models.loading import LoadedModel
from attnserve.service.engine.request.attribution import Explain, explained_label
from attnserve.service.errors import InvalidArgument

ATTRIBUTION, ATTRIBUTION_ROWS = "ATTRIBUTION", "ATTRIBUTION_ROWS"
OUTPUTS = (ATTRIBUTION, ATTRIBUTION_ROWS)
DECLS = (TensorDecl(ATTRIBUTION, "FP32", (-1, -1)), TensorDecl(ATTRIBUTION_ROWS, "INT32", (-1,)))
METHOD, BUDGET, LABEL = "attribution", "attribution_budget", "attribution_label"  # the request's parameters
PARAMETERS = (METHOD, BUDGET, LABEL)
MAX_BUDGET = 1_000_000  # as the JSON API's; the server's max_attribution_rows caps it further


def parse_method(value: object, where: str) -> Attribution:
    """The `attribution` parameter (a string) as its method."""
    return parse_word(Attribution, value, field=where)


def parse_budget(value: object, where: str) -> int:
    """The `attribution_budget` parameter: an integer from 0 to MAX_BUDGET."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_BUDGET:
        raise InvalidArgument(f"{where}: expected an integer from 0 to {MAX_BUDGET}, not {quote(value, 24)}")
    return value


def read_parameters(parameters: Mapping[str, object]) -> tuple[Attribution | None, int, str]:
    """The request's method (None: not given), budget and label, from its parameters' values."""
    method = parameters.get(METHOD)
    budget = parameters.get(BUDGET)
    label = parameters.get(LABEL, "")
    if not isinstance(label, str):
        raise InvalidArgument(f"parameters.{LABEL}: expected a label's name, not {quote(label, 24)}")
    return (
        None if method is None else parse_method(method, f"parameters.{METHOD}"),
        0 if budget is None else parse_budget(budget, f"parameters.{BUDGET}"),
        label,
    )


def explain(request: InferRequest, wanted: list[str], named: bool, model: LoadedModel) -> Explain:
    """What a request that names a method asks attributed (`named`: the request named its
    outputs; else `wanted` is every declared one)."""
    method = request.attribution
    if method is None or method == Attribution.NONE:
        return Explain()
    if named and not any(name in OUTPUTS for name in wanted):
        raise InvalidArgument(
            f"parameters.{METHOD}: computes the {ATTRIBUTION} and {ATTRIBUTION_ROWS} outputs, and "
            "the request asks for neither"
        )
    label = explained_label(model.labels, request.attribution_label, model.name, f"parameters.{LABEL}")
    return Explain(method, request.attribution_budget, label)
