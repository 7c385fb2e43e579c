"""FHIR query tools for a CodeAct episode: ``search``, ``read``, ``neighbors``, scoped to one patient.

Two layers. A **backend** (:class:`FhirBackend`) answers FHIR search and read: ``search(resource_type,
params)`` with FHIR search parameters (``patient``, ``code``, ``date=ge2020-01-01``, ``_sort=-date``,
``_count``) and ``read(resource_type, id)``. :class:`SqliteBackend` serves the embedded store
(:mod:`.fhir_store`). A FHIR server fits the same protocol: ``search`` is ``GET [base]/[type]?params``
(the resources of the returned Bundle's entries) and ``read`` is ``GET [base]/[type]/[id]`` (None on
404); the parameter names are FHIR's, so they pass through unchanged (not built here: no HTTP client).

The **tools** (:class:`PatientTools`) sit above any backend and enforce the traversal constraints of
the episode: only the resource types and search parameters of :data:`SEARCH_PARAMS`; every search is
restricted to the current patient's compartment (a ``patient``/``subject`` naming another patient is
refused); ``read`` and ``neighbors`` reach only the current patient and resources whose ``subject`` is
that patient, and refuse a missing id and another patient's with the same words (no existence oracle);
``neighbors`` follows only the reference fields of :data:`FORWARD` and the reverse links of
:data:`REVERSE`. A refused call raises :class:`FhirToolError`, which the sandbox session hands to the
model's code as a ``ToolError`` (an error observation; the episode goes on).
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Protocol

from .fhir_store import COLUMNS, RESOURCE_TYPES, FhirStore

# resource type -> search parameter -> (column, kind); kinds: token, ref, date, number
_COMMON = {"_id": ("id", "token")}
SEARCH_PARAMS: dict[str, dict[str, tuple[str, str]]] = {
    "Patient": {**_COMMON, "gender": ("gender", "token"), "birthdate": ("birthdate", "date")},
    "Encounter": {
        **_COMMON,
        "patient": ("patient", "ref"),
        "subject": ("patient", "ref"),
        "class": ("class", "token"),
        "date": ("date", "date"),
    },
    "Observation": {
        **_COMMON,
        "patient": ("patient", "ref"),
        "subject": ("patient", "ref"),
        "encounter": ("encounter", "ref"),
        "code": ("code", "token"),
        "date": ("date", "date"),
        "value-quantity": ("value", "number"),
    },
    "Condition": {
        **_COMMON,
        "patient": ("patient", "ref"),
        "subject": ("patient", "ref"),
        "encounter": ("encounter", "ref"),
        "code": ("code", "token"),
        "clinical-status": ("status", "token"),
        "onset-date": ("date", "date"),
    },
    "MedicationRequest": {
        **_COMMON,
        "patient": ("patient", "ref"),
        "subject": ("patient", "ref"),
        "encounter": ("encounter", "ref"),
        "code": ("code", "token"),
        "status": ("status", "token"),
        "authoredon": ("date", "date"),
    },
}
RESULT_PARAMS = ("_sort", "_count")  # _sort: date or -date; _count: at most that many results
FORWARD = {
    "Encounter": {"subject": "Patient"},
    "Observation": {"subject": "Patient", "encounter": "Encounter"},
    "Condition": {"subject": "Patient", "encounter": "Encounter"},
    "MedicationRequest": {"subject": "Patient", "encounter": "Encounter"},
}
# resource type -> the types that point back at it -> their search parameter naming it
REVERSE = {
    "Patient": {t: "patient" for t in RESOURCE_TYPES if t != "Patient"},
    "Encounter": {"Observation": "encounter", "Condition": "encounter", "MedicationRequest": "encounter"},
}
_PREFIXES = {"eq": "=", "ne": "!=", "gt": ">", "lt": "<", "ge": ">=", "le": "<="}

TOOL_DOCS = """search(resource_type, **params) -> list of resources (dicts) of the current patient.
  resource_type: Patient, Encounter, Observation, Condition or MedicationRequest.
  params (FHIR search): Observation: code, date, encounter, value-quantity; Encounter: class, date;
  Condition: code, clinical-status, encounter, onset-date; MedicationRequest: code, status, encounter,
  authoredon; any: _id, _sort='date' or '-date', _count=N. Dates and numbers take a prefix: date='ge2021-01-01'.
  A parameter named with a dash is passed as search('Observation', **{'value-quantity': 'gt100'}).
read(reference) -> one resource, e.g. read('Encounter/enc-001-1').
neighbors(resource, field) -> list: a reference field (subject, encounter), or a resource type that
  points back at it (neighbors(encounter, 'Observation')).
final_answer(x) ends the episode with x as the answer."""


class FhirToolError(ValueError):
    """A tool call the episode refuses (unknown type or parameter, a reference out of reach)."""


class FhirBackend(Protocol):
    def search(self, resource_type: str, params: Mapping[str, str]) -> list[dict[str, Any]]: ...

    def read(self, resource_type: str, rid: str) -> dict[str, Any] | None: ...


def _condition(column: str, kind: str, value: str) -> tuple[str, Any]:
    """One SQL condition and its argument for a search parameter's value."""
    if kind == "ref":
        return f'"{column}" = ?', value.rsplit("/", 1)[-1]
    if kind == "token":
        return f'"{column}" = ?', value.rsplit("|", 1)[-1]
    op, rest = ("=", value)
    if value[:2] in _PREFIXES:
        op, rest = _PREFIXES[value[:2]], value[2:]
    if kind == "number":
        try:
            return f'"{column}" {op} ?', float(rest)
        except ValueError as err:
            raise FhirToolError(f"{value!r} is not a number (with an optional prefix: gt100)") from err
    return f'substr("{column}", 1, ?) {op} ?', (len(rest), rest)  # a date compares at its own precision


class SqliteBackend:
    """FHIR search and read over a :class:`~reasonrl.envs.fhir_store.FhirStore` (parameters already checked)."""

    def __init__(self, store: FhirStore):
        self.store = store

    def search(self, resource_type: str, params: Mapping[str, str]) -> list[dict[str, Any]]:
        where, args = [], []
        for name, value in params.items():
            if name in RESULT_PARAMS:
                continue
            column, kind = SEARCH_PARAMS[resource_type][name]
            sql, arg = _condition(column, kind, str(value))
            where.append(sql)
            args.extend(arg if isinstance(arg, tuple) else (arg,))
        order = "id"
        if "date" in COLUMNS[resource_type] and params.get("_sort") in ("date", "-date"):
            order = '"date" DESC, id DESC' if params["_sort"] == "-date" else '"date", id'
        sql = f'SELECT json FROM "{resource_type}"' + (" WHERE " + " AND ".join(where) if where else "")
        sql += f" ORDER BY {order} LIMIT ?"
        return [json.loads(r[0]) for r in self.store.query(sql, (*args, int(params.get("_count", 1000))))]

    def read(self, resource_type: str, rid: str) -> dict[str, Any] | None:
        rows = self.store.query(f'SELECT json FROM "{resource_type}" WHERE id = ?', (rid,))
        return json.loads(rows[0][0]) if rows else None


class PatientTools:
    """The episode's tools over ``backend``, confined to patient ``patient_id`` (see the module docs).
    ``max_results`` caps a search's list (the model can page with ``_count`` and ``date``)."""

    def __init__(self, backend: FhirBackend, patient_id: str, max_results: int = 50):
        self.backend, self.patient, self.max_results = backend, patient_id, max_results
        self.calls: list[tuple[str, str]] = []  # (tool, what it returned or refused), for judges and tests

    def as_tools(self) -> dict[str, Any]:
        return {"search": self.search, "read": self.read, "neighbors": self.neighbors}

    def _refuse(self, tool: str, why: str) -> None:
        self.calls.append((tool, f"refused: {why}"))
        raise FhirToolError(why)

    def _check_type(self, tool: str, resource_type: Any) -> str:
        if resource_type not in SEARCH_PARAMS:
            self._refuse(tool, f"unknown resource type {resource_type!r}; valid: {', '.join(SEARCH_PARAMS)}")
        return resource_type

    def search(self, resource_type: str, **params: Any) -> list[dict[str, Any]]:
        kind = self._check_type("search", resource_type)
        valid = SEARCH_PARAMS[kind]
        bad = sorted(set(params) - set(valid) - set(RESULT_PARAMS))
        if bad:
            self._refuse(
                "search",
                f"unsupported search parameter(s) {bad} for {kind}; valid: {', '.join([*valid, *RESULT_PARAMS])}",
            )
        params = {k: str(v) for k, v in params.items()}
        for key in ("patient", "subject"):
            if key in params and params[key].rsplit("/", 1)[-1] != self.patient:
                self._refuse(
                    "search", f"{key}={params[key]!r} is outside the current patient's record (Patient/{self.patient})"
                )
            params.pop(key, None)
        if kind == "Patient":
            if params.get("_id", self.patient) != self.patient:
                self._refuse("search", f"Patient/{params['_id']} is not the current patient (Patient/{self.patient})")
            params["_id"] = self.patient
        else:
            params["patient"] = self.patient
        if not params.get("_count", "1").isdigit():
            self._refuse("search", f"_count must be a whole number, got {params['_count']!r}")
        count = min(int(params.get("_count", self.max_results)), self.max_results)
        found = self.backend.search(kind, {**params, "_count": str(count)})
        self.calls.append(("search", f"{kind}: {len(found)} found"))
        return found

    def read(self, reference: str) -> dict[str, Any]:
        if not isinstance(reference, str) or reference.count("/") != 1:
            self._refuse("read", f"a reference is 'Type/id' (e.g. 'Patient/{self.patient}'), got {reference!r}")
        kind, rid = reference.split("/")
        self._check_type("read", kind)
        found = self.backend.read(kind, rid)
        if found is None or not self._reachable(found):  # one answer for both: no existence oracle (issue 41)
            self._refuse("read", f"no resource {reference} in the current patient's record (Patient/{self.patient})")
        self.calls.append(("read", reference))
        return found

    def _reachable(self, resource: dict[str, Any]) -> bool:
        if resource["resourceType"] == "Patient":
            return resource["id"] == self.patient
        return resource.get("subject", {}).get("reference") == f"Patient/{self.patient}"

    def neighbors(self, resource: Any, field: str) -> list[dict[str, Any]]:
        if isinstance(resource, dict) and "resourceType" in resource and "id" in resource:
            resource = f"{resource['resourceType']}/{resource['id']}"
        node = self.read(resource)  # from the store, not the caller's copy: its reach is checked there
        kind = node["resourceType"]
        forward, reverse = FORWARD.get(kind, {}), REVERSE.get(kind, {})
        if field in forward:
            ref = node.get(field)
            return [] if ref is None else [self.read(ref["reference"])]
        if field in reverse:
            return self.search(field, **{reverse[field]: node["id"]})
        self._refuse("neighbors", f"{kind} has no link {field!r}; valid: {', '.join([*forward, *reverse]) or 'none'}")
        return []
