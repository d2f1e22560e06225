"""The conformance table as people read it: a coverage summary (printed at the end of a
run) and ``docs/conformance.md`` (coverage, every failing (op, dtype, form) with its
reason, the registry's ops no sample reached), both from the table alone.

# NOTE: everything here reads a :class:`~ortlab.backend._conformance.Table` and its
# ``meta``, so the document can be rewritten from ``conformance.json`` without running
# the suite again.
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from typing import Any

from ortlab.backend import _conformance


def _dtype_rows(meta: Mapping[str, Any]) -> list[str]:
    rows = [
        "| dtype | keys verified | keys failing | ops reached | ops verified in every form |",
        "|---|---|---|---|---|",
    ]
    ops = meta.get("ops_by_dtype", {})
    for dtype, counts in meta.get("keys_by_dtype", {}).items():
        reached = ops.get(dtype, {})
        rows.append(
            f"| {dtype} | {counts['verified']} | {counts['fails']} "
            f"| {reached.get('reached', '')} | {reached.get('verified', '')} |"
        )
    return rows


def summary(table: _conformance.Table) -> str:
    """A few lines of coverage: registry ops verified, keys verified and failing (per
    dtype), the run's size and time."""
    meta = table.meta
    registry = meta.get("registry", {})
    keys = meta.get("keys", {})
    opinfos = meta.get("opinfos", {})
    lines = [
        f"registry ops reached {registry.get('reached', 0)} of {registry.get('claimed', 0)}; "
        f"verified for some dtype and form {registry.get('verified_somewhere', 0)}",
        f"keys (op, dtype, form): {keys.get('verified', 0)} verified, "
        f"{keys.get('fails', 0)} failing",
    ]
    ops = meta.get("ops_by_dtype", {})
    for dtype, counts in meta.get("keys_by_dtype", {}).items():
        reached = ops.get(dtype, {})
        lines.append(
            f"  {dtype:9} {counts['verified']:5} verified {counts['fails']:5} failing; ops "
            f"verified in every form {reached.get('verified', 0)} of "
            f"{reached.get('reached', 0)}"
        )
    lines.append(
        f"OpInfos sampled {opinfos.get('sampled', 0)} of {opinfos.get('selected', 0)}, "
        f"{opinfos.get('samples', 0)} samples, {opinfos.get('node_checks', 0)} node checks, "
        f"{opinfos.get('exports', 0)} models exported, {meta.get('seconds', 0)} s"
    )
    return "\n".join(lines)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _failing(table: _conformance.Table, dtypes: Container[str]) -> list[str]:
    rows = [
        "| op | dtype / form | outputs | failed | reason | seen on |",
        "|---|---|---|---|---|---|",
    ]
    for target in table.ops():
        for key, finding in sorted(table.rows[target].items()):
            if finding.status != "fails" or key.split("/")[0] not in dtypes:
                continue
            outputs = ", ".join(map(str, finding.outputs)) or "all"
            failed = f"{finding.failures or '?'} of {finding.samples}"
            if finding.errors_only:
                failed += ", errors only"
            seen = finding.witness.text() if finding.witness else ""
            rows.append(
                f"| `{target}` | {key} | {outputs} | {failed} | {_cell(finding.reason)} "
                f"| {_cell(seen)} |"
            )
    return rows


def markdown(table: _conformance.Table) -> str:
    """``docs/conformance.md``: how the table was made, its coverage, every failing
    key, the registry's ops no sample reached and the OpInfos with notes."""
    meta = table.meta
    versions = meta.get("versions", {})
    settings = meta.get("settings", {})
    registry = meta.get("registry", {})
    stack = ", ".join(f"{name} {version}" for name, version in versions.items())
    backward = ", ".join(settings.get("backward_dtypes", [])) or "no dtype"
    lines = [
        "# Conformance: ONNX translations verified against PyTorch",
        "",
        "<!-- written by `make conformance` (ortlab conformance); do not edit -->",
        "",
        "ortlab runs a node in ONNX Runtime when its translation is registered **and** this "
        "table does not reject it for the node's dtype and form (see `_support`). The table "
        "comes from PyTorch's OpInfo samples, lowered to ATen as ortlab lowers them, every "
        "node of the lowered graphs exported as a one-node partition by ortlab, run by ONNX "
        "Runtime and compared output by output with PyTorch's result on the same inputs.",
        "",
        f"- made {meta.get('date', '?')} with {stack}; {meta.get('provider', '?')}, opset "
        f"{meta.get('opset', '?')}",
        f"- {settings.get('samples', '?')} samples per OpInfo and dtype, each as given and "
        "non-contiguous; inference graphs (make_fx), and forward + backward graphs "
        f"(AOTAutograd) for {backward}; ortlab's decompositions and the exporter's "
        "(which keep every registered op whole)",
        f"- {meta.get('seconds', '?')} s on this machine",
        "",
        "## Coverage",
        "",
        "```",
        summary(table),
        "```",
        "",
        *_dtype_rows(meta),
        "",
        "## Failing translations",
        "",
        "Every (op, dtype, form) some sample failed. *outputs*: the outputs that disagree "
        "(*all*: the node as a whole: its translation, session or run failed, or its only "
        "output differs). *failed*: node calls that failed of those checked; *errors "
        "only*: every failure was an error (translation, session or run), never a wrong "
        "number, so ortlab's runtime would fall back where it fails. *seen on*: the "
        "sample of the first failure (reported: a whole-node failure before an output's).",
        "",
        *_failing(table, [d for d in _conformance.DTYPES.values() if d != "bfloat16"]),
        "",
        "### bfloat16",
        "",
        "ONNX Runtime's CPU provider has few bfloat16 kernels (`Could not find an "
        "implementation for ...`; a missing CPU kernel rejects only nodes on the CPU: "
        "CUDA's provider has its own): "
        f"{meta.get('keys_by_dtype', {}).get('bfloat16', {}).get('verified', 0)} "
        "bfloat16 keys are verified.",
        "",
        *_failing(table, ["bfloat16"]),
        "",
        "## Registered ops no sample reached",
        "",
        f"{len(registry.get('not_reached', []))} of the {registry.get('claimed', 0)} ATen "
        "overloads torchlib's registry claims appear in no lowered sample graph (they "
        "run in ONNX Runtime unverified):",
        "",
        ", ".join(f"`{t}`" for t in registry.get("not_reached", [])),
        "",
    ]
    empty = meta.get("empty_inputs", {})
    if empty:
        apart = _conformance.Table(
            {
                target: {k: _conformance.Finding.from_dict(r) for k, r in keyed.items()}
                for target, keyed in empty.get("failing", {}).items()
            },
            {},
        )
        lines += [
            "## Failures on empty inputs (filed apart)",
            "",
            f"{empty.get('checked', 0)} node calls had an empty tensor input. They are not "
            "filed under their (op, dtype, form): the key cannot tell an empty input from "
            "any other, and these edge cases would reject the op for every input. A node "
            "whose input is empty at run time meets them unverified:",
            "",
            *_failing(apart, _conformance.DTYPES.values()),
            "",
        ]
    notes = meta.get("notes", {})
    if notes:
        lines += ["## OpInfos with notes", ""]
        for op, texts in sorted(notes.items()):
            lines.append(f"- `{op}`: " + "; ".join(_cell(t) for t in texts))
        lines.append("")
    return "\n".join(lines)
