"""What a conformance check reports: the statuses, :class:`RuleResult` (one
check's outcome, naming the rule of :data:`bridge.kit.rules.RULES` it judges)
and :class:`Report` (all of them for one subject), and how an outcome's
detail words the values and exceptions it saw."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from typing import Any

from bridge.kit.rules import RULES, Rule

__all__ = ["PASSED", "FAILED", "WARNING", "NOT_APPLICABLE", "STATUSES", "RENAMED", "RuleResult", "Report",
           "short", "exc_text"]  # fmt: skip

PASSED = "passed"
FAILED = "failed"
WARNING = "warning"
NOT_APPLICABLE = "not applicable"
STATUSES = (PASSED, FAILED, WARNING, NOT_APPLICABLE)


@dataclass(frozen=True, slots=True)
class RuleResult:
    """The outcome of one check: ``name`` (the check's, unique in a report:
    what ``report[name]`` and the pytest plugin's ``ignore=`` take),
    ``status`` (one of :data:`PASSED`, :data:`FAILED`, :data:`WARNING`,
    :data:`NOT_APPLICABLE`), ``detail`` (what was observed, or why the check
    does not apply) and ``rule``: the key of :data:`bridge.kit.rules.RULES`
    the check judges, whose spec and section :meth:`cite` gives."""

    name: str
    status: str
    detail: str
    rule: str = ""

    def spec_rule(self) -> Rule | None:
        """The :class:`~bridge.kit.rules.Rule` this result judges (None for an unnamed one)."""
        return RULES.get(self.rule)

    def cite(self) -> str:
        """``"<rule>: <spec>, <section>"``, how a report names the rule's source."""
        r = self.spec_rule()
        return f"{r.name}: {r.cite()}" if r is not None else self.rule

    def to_dict(self) -> dict[str, str]:
        """``{"name", "status", "detail", "rule", "spec", "url"}``, JSON-ready
        (``spec`` is the rule's spec and section)."""
        r = self.spec_rule()
        return {"name": self.name, "status": self.status, "detail": self.detail, "rule": self.rule,
                "spec": r.cite() if r is not None else "", "url": r.url if r is not None else ""}  # fmt: skip


@dataclass(slots=True)
class Report:
    """What :func:`bridge.check` found: one :class:`RuleResult` per rule, in order.

    ``bool(report)`` is true when no rule failed (warnings and
    not-applicable entries do not count against it). ``str(report)`` is a
    readable table (rich when installed, plain text otherwise);
    :meth:`to_dict` is the JSON form.
    """

    subject: str
    entries: list[RuleResult] = field(default_factory=list)

    def _with(self, status: str) -> list[RuleResult]:
        return [e for e in self.entries if e.status == status]

    @property
    def passed(self) -> list[RuleResult]:
        """The entries that passed."""
        return self._with(PASSED)

    @property
    def failed(self) -> list[RuleResult]:
        """The entries that failed; empty when the subject conforms."""
        return self._with(FAILED)

    @property
    def warnings(self) -> list[RuleResult]:
        """Entries whose rule is met in a form the rules do not recommend."""
        return self._with(WARNING)

    @property
    def not_applicable(self) -> list[RuleResult]:
        """Entries for rules that do not apply to this subject (detail says why)."""
        return self._with(NOT_APPLICABLE)

    def __bool__(self) -> bool:
        return not self.failed

    def __getitem__(self, name: str) -> RuleResult:
        """The entry for check ``name``; KeyError when there is none (naming
        the new name of a renamed check, :data:`RENAMED`)."""
        for e in self.entries:
            if e.name == name:
                return e
        if name in RENAMED:
            raise KeyError(f"{name!r} was renamed {RENAMED[name]!r}")
        raise KeyError(name)

    def __contains__(self, name: object) -> bool:
        return any(e.name == name for e in self.entries)

    def summary(self) -> str:
        """One line: the counts per status."""
        counts = [f"{len(self._with(s))} {s}" for s in STATUSES]
        verdict = "conforms" if self else "DOES NOT CONFORM"
        return f"{self.subject}: {verdict} ({', '.join(counts)})"

    def to_dict(self) -> dict[str, Any]:
        """``{"subject", "ok", "counts", "entries"}``, JSON-ready."""
        return {
            "subject": self.subject,
            "ok": bool(self),
            "counts": {s: len(self._with(s)) for s in STATUSES},
            "entries": [e.to_dict() for e in self.entries],
        }

    def format(self, use_rich: bool | None = None, width: int = 120) -> str:
        """The report as a table; ``use_rich`` None uses rich when it is
        importable, False forces plain text. Never contains colour codes."""
        if use_rich is not False:
            try:
                from rich.console import Console
                from rich.table import Table
            except ImportError:
                if use_rich:
                    raise
            else:
                table = Table(title=f"DLPack conformance: {self.subject}", title_justify="left")
                table.add_column("check", no_wrap=True)
                table.add_column("status", no_wrap=True)
                table.add_column("rule (spec, section)", overflow="fold")
                table.add_column("detail", overflow="fold")
                for e in self.entries:
                    table.add_row(e.name, e.status, e.cite(), e.detail)
                out = io.StringIO()
                console = Console(file=out, width=width, color_system=None, force_terminal=False)
                console.print(table)
                console.print(self.summary())
                return "\n".join(line.rstrip() for line in out.getvalue().splitlines())
        name_w = max([len(e.name) for e in self.entries] + [5])
        lines = [
            f"DLPack conformance: {self.subject}",
            f"{'check':<{name_w}}  {'status':<14}  detail [rule: spec, section]",
        ]
        lines += [f"{e.name:<{name_w}}  {e.status:<14}  {e.detail} [{e.cite()}]" for e in self.entries]
        lines.append(self.summary())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


#: Checks renamed since an earlier release: old name -> new name. An old
#: name is an error that names the new one (in ``ignore=`` and ``report[...]``).
RENAMED: dict[str, str] = {"strides-non-null": "strides", "dtype-native-known": "dtype"}


def short(values: Any, limit: int = 60) -> str:
    """``repr(values)``, cut to ``limit`` characters (ending in ``...`` when cut)."""
    text = repr(values)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def exc_text(e: BaseException) -> str:
    """``TypeName('first line of the message')`` (the message cut to 120
    characters), or just ``TypeName`` for an exception without a message."""
    msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
    if len(msg) > 120:
        msg = msg[:117] + "..."
    return f"{type(e).__name__}({msg!r})" if msg else type(e).__name__
