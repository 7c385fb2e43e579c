"""A seeded synthetic hospital as FHIR R4 resources in an embedded SQLite store (spec section 6).

:func:`synthetic_hospital` draws patients, encounters, observations (LOINC codes, quantities),
conditions (SNOMED codes) and medication requests (RxNorm codes) from a seed. Every resource is built
through the model classes of ``fhir.resources`` (its R4B package: R4 with errata), so an invalid
resource raises when it is made, not when a tool reads it. :class:`FhirStore` keeps them in SQLite
(stdlib ``sqlite3``, ``:memory:`` by default, one store per process and seed): one table per resource
type holding the resource's JSON beside indexed search columns (patient, encounter, code, date, value,
status). The question templates compute their gold answers with their own SQL over these tables
(:mod:`reasonrl.tasks.fhir`); the tools read through :mod:`.fhir_tools`.
"""

from __future__ import annotations

import datetime as dt
import importlib
import json
import random
import sqlite3
import threading
from typing import Any, Iterable

from ..errors import UserError

LOINC, SNOMED, RXNORM = "http://loinc.org", "http://snomed.info/sct", "http://www.nlm.nih.gov/research/umls/rxnorm"
ENCOUNTER_CLASS = "http://terminology.hl7.org/CodeSystem/v3-ActCode"
# code -> (display, unit, low, high): the observations' codes and their value ranges
OBSERVATION_CODES = {
    "2345-7": ("Glucose", "mg/dL", 70.0, 180.0),
    "4548-4": ("Hemoglobin A1c", "%", 4.5, 10.0),
    "2160-0": ("Creatinine", "mg/dL", 0.5, 2.0),
    "8867-4": ("Heart rate", "/min", 50.0, 120.0),
    "8480-6": ("Systolic blood pressure", "mm[Hg]", 95.0, 170.0),
    "29463-7": ("Body weight", "kg", 45.0, 120.0),
}
CONDITION_CODES = {
    "44054006": "Diabetes mellitus type 2",
    "38341003": "Hypertension",
    "195967001": "Asthma",
    "709044004": "Chronic kidney disease",
}
MEDICATION_CODES = {
    "860975": "Metformin 500 MG",
    "314076": "Lisinopril 10 MG",
    "745679": "Albuterol inhaler",
    "617314": "Atorvastatin 10 MG",
}
ENCOUNTER_CLASSES = {"AMB": "ambulatory", "EMER": "emergency", "IMP": "inpatient"}
MODULES = {
    "Patient": "patient",
    "Encounter": "encounter",
    "Observation": "observation",
    "Condition": "condition",
    "MedicationRequest": "medicationrequest",
}
# resource type -> its search columns (beside id and json); every one is indexed
COLUMNS = {
    "Patient": ("gender", "birthdate"),
    "Encounter": ("patient", "class", "date"),
    "Observation": ("patient", "encounter", "code", "date", "value"),
    "Condition": ("patient", "encounter", "code", "status", "date"),
    "MedicationRequest": ("patient", "encounter", "code", "status", "date"),
}
RESOURCE_TYPES = tuple(COLUMNS)


def model_class(resource_type: str):
    """The ``fhir.resources`` (R4B) model class of a resource type; a missing package is one UserError line."""
    try:
        module = importlib.import_module(f"fhir.resources.R4B.{MODULES[resource_type]}")
    except ModuleNotFoundError as err:
        raise UserError("the fhir task needs the fhir.resources package: pip install 'fhir.resources>=8'") from err
    return getattr(module, resource_type)


def make_resource(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` validated by its ``fhir.resources`` model (an invalid resource raises ``ValidationError``),
    as the JSON dict the model writes."""
    resource = model_class(data["resourceType"]).model_validate(data)
    return json.loads(resource.model_dump_json(exclude_none=True))


def _ref(resource_type: str, rid: str) -> dict[str, str]:
    return {"reference": f"{resource_type}/{rid}"}


def _coding(system: str, code: str, display: str) -> dict[str, Any]:
    return {"coding": [{"system": system, "code": code, "display": display}], "text": display}


def _patient(rng: random.Random, k: int) -> dict[str, Any]:
    birth = dt.date(1940, 1, 1) + dt.timedelta(days=rng.randrange(0, 60 * 365))
    return {
        "resourceType": "Patient",
        "id": f"pat-{k:03d}",
        "gender": rng.choice(["female", "male"]),
        "birthDate": birth.isoformat(),
        "name": [{"family": f"Doe{k}", "given": [f"Sam{k}"]}],
    }


def _encounters(rng: random.Random, pid: str, n: int) -> list[dict[str, Any]]:
    # distinct days per patient, so every date of a patient's record is unique (no ties for "latest")
    days = sorted(rng.sample(range(0, 5 * 365), n))
    out = []
    for j, day in enumerate(days):
        start = dt.datetime(2019, 1, 1, 8) + dt.timedelta(days=day)
        cls = rng.choice(sorted(ENCOUNTER_CLASSES))
        out.append(
            {
                "resourceType": "Encounter",
                "id": f"enc-{pid[4:]}-{j + 1}",
                "status": "finished",
                "class": {"system": ENCOUNTER_CLASS, "code": cls, "display": ENCOUNTER_CLASSES[cls]},
                "subject": _ref("Patient", pid),
                "period": {"start": start.isoformat() + "Z", "end": (start + dt.timedelta(hours=6)).isoformat() + "Z"},
            }
        )
    return out


def _observations(rng: random.Random, pid: str, enc: dict[str, Any]) -> list[dict[str, Any]]:
    start = dt.datetime.fromisoformat(enc["period"]["start"].rstrip("Z"))
    out = []
    for k in range(rng.randint(1, 4)):  # one per hour of the encounter: distinct times
        code = rng.choice(sorted(OBSERVATION_CODES))
        display, unit, lo, hi = OBSERVATION_CODES[code]
        value = round(rng.uniform(lo, hi), 1)
        out.append(
            {
                "resourceType": "Observation",
                "id": f"obs-{enc['id'][4:]}-{k + 1}",
                "status": "final",
                "code": _coding(LOINC, code, display),
                "subject": _ref("Patient", pid),
                "encounter": _ref("Encounter", enc["id"]),
                "effectiveDateTime": (start + dt.timedelta(hours=k)).isoformat() + "Z",
                "valueQuantity": {"value": value, "unit": unit, "system": "http://unitsofmeasure.org"},
            }
        )
    return out


def _condition(rng: random.Random, pid: str, enc: dict[str, Any], k: int, code: str) -> dict[str, Any]:
    status = rng.choice(["active", "active", "resolved"])
    return {
        "resourceType": "Condition",
        "id": f"cond-{pid[4:]}-{k}",
        "subject": _ref("Patient", pid),
        "encounter": _ref("Encounter", enc["id"]),
        "code": _coding(SNOMED, code, CONDITION_CODES[code]),
        "clinicalStatus": {
            "coding": [{"system": "http://terminology.hl7.org/CodeSystem/condition-clinical", "code": status}]
        },
        "onsetDateTime": enc["period"]["start"][:10],
    }


def _medication(rng: random.Random, pid: str, enc: dict[str, Any], k: int, code: str) -> dict[str, Any]:
    return {
        "resourceType": "MedicationRequest",
        "id": f"med-{pid[4:]}-{k}",
        "status": rng.choice(["active", "stopped"]),
        "intent": "order",
        "subject": _ref("Patient", pid),
        "encounter": _ref("Encounter", enc["id"]),
        "medicationCodeableConcept": _coding(RXNORM, code, MEDICATION_CODES[code]),
        "authoredOn": enc["period"]["start"][:10],
    }


def synthetic_hospital(seed: int = 0, n_patients: int = 40) -> list[dict[str, Any]]:
    """Every resource of a hospital drawn from ``seed`` (the same list for the same seed, in any process),
    each validated by ``fhir.resources``."""
    if n_patients < 1:
        raise UserError(f"the fhir hospital needs n_patients >= 1, got {n_patients}")
    rng, out = random.Random(f"reasonrl-fhir:{seed}"), []
    for k in range(1, n_patients + 1):
        patient = _patient(rng, k)
        pid = patient["id"]
        encounters = _encounters(rng, pid, rng.randint(1, 4))
        out += [patient, *encounters]
        for enc in encounters:
            out += _observations(rng, pid, enc)
        for j, code in enumerate(rng.sample(sorted(CONDITION_CODES), rng.randint(0, 2))):
            out.append(_condition(rng, pid, rng.choice(encounters), j + 1, code))
        for j, code in enumerate(rng.sample(sorted(MEDICATION_CODES), rng.randint(0, 2))):
            out.append(_medication(rng, pid, rng.choice(encounters), j + 1, code))
    return [make_resource(r) for r in out]


def _ref_id(value: dict[str, Any] | None) -> str | None:
    return None if value is None else value["reference"].split("/", 1)[1]


def search_columns(r: dict[str, Any]) -> dict[str, Any]:
    """The indexed columns of one resource (:data:`COLUMNS`), read from its JSON."""
    kind = r["resourceType"]
    if kind == "Patient":
        return {"gender": r.get("gender"), "birthdate": r.get("birthDate")}
    row = {"patient": _ref_id(r.get("subject"))}
    if kind == "Encounter":
        return {**row, "class": r["class"]["code"], "date": r["period"]["start"]}
    row["encounter"], row["code"] = _ref_id(r.get("encounter")), None
    if kind == "Observation":
        return {
            **row,
            "code": r["code"]["coding"][0]["code"],
            "date": r.get("effectiveDateTime"),
            "value": (r.get("valueQuantity") or {}).get("value"),
        }
    if kind == "Condition":
        status = r.get("clinicalStatus", {}).get("coding", [{}])[0].get("code")
        return {**row, "code": r["code"]["coding"][0]["code"], "status": status, "date": r.get("onsetDateTime")}
    concept = r["medicationCodeableConcept"]["coding"][0]["code"]
    return {**row, "code": concept, "status": r["status"], "date": r.get("authoredOn")}


class FhirStore:
    """The resources in SQLite: one table per type (``id``, ``json`` and the :data:`COLUMNS`, indexed).
    Thread-safe (one lock; episodes step their environments on threads)."""

    def __init__(self, resources: Iterable[dict[str, Any]], path: str = ":memory:"):
        self.db = sqlite3.connect(path, check_same_thread=False)
        self.lock = threading.Lock()
        for kind, cols in COLUMNS.items():
            self.db.execute(
                f'CREATE TABLE "{kind}" (id TEXT PRIMARY KEY, json TEXT NOT NULL, '
                + ", ".join(f'"{c}"' for c in cols)
                + ")"
            )
            for c in cols:
                self.db.execute(f'CREATE INDEX "ix_{kind}_{c}" ON "{kind}" ("{c}")')
        for r in resources:
            self.add(r)
        self.db.commit()

    def add(self, resource: dict[str, Any]) -> None:
        """Validate (``fhir.resources``) and insert one resource."""
        kind = resource.get("resourceType")
        if kind not in COLUMNS:
            raise UserError(f"FhirStore: unsupported resource type {kind!r}; supported: {list(COLUMNS)}")
        r = make_resource(resource)
        cols = search_columns(r)
        names = ["id", "json", *COLUMNS[kind]]
        values = [r["id"], json.dumps(r, sort_keys=True), *(cols[c] for c in COLUMNS[kind])]
        self.db.execute(
            f'INSERT INTO "{kind}" ('
            + ", ".join(f'"{n}"' for n in names)
            + ") VALUES ("
            + ", ".join("?" * len(names))
            + ")",
            values,
        )

    def query(self, sql: str, args: tuple | dict = ()) -> list[tuple]:
        """Rows of a read-only SQL query (the gold answers' and the tool backend's); ``args`` positional
        (``?``) or named (``:name``)."""
        with self.lock:
            return self.db.execute(sql, args).fetchall()


_STORES: dict[tuple[int, int], FhirStore] = {}
_STORES_LOCK = threading.Lock()


def hospital_store(seed: int = 0, n_patients: int = 40) -> FhirStore:
    """The process's store of :func:`synthetic_hospital` ``(seed, n_patients)``, built once."""
    with _STORES_LOCK:
        key = (int(seed), int(n_patients))
        if key not in _STORES:
            _STORES[key] = FhirStore(synthetic_hospital(seed, n_patients))
        return _STORES[key]
