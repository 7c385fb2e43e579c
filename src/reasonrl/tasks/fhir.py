"""Built-in task ``fhir``: questions about one patient's FHIR record, answered by a CodeAct agent (spec 6).

The hospital is :func:`~reasonrl.envs.fhir_store.synthetic_hospital` (``hospital_seed``,
``n_patients``) in the process's SQLite store. Question templates (:data:`TEMPLATES`):

* ``count``: how many observations of a code the patient has;
* ``latest``: the patient's most recent value of a code;
* ``encounters_with``: how many of the patient's encounters of a class have an observation of a code
  (a filter across two resource types);
* ``max`` / ``mean``: the largest / average value of a code (aggregation; the mean rounded to 0.1).

Each gold answer is one SQL query over the store's tables (:data:`GOLD_SQL`), written for the answer and
independent of the tools' search code. The split is by patient: a salted hash of the patient id puts a
patient (all its questions) in the held-out split. ``environment(item)`` is a
:class:`~reasonrl.envs.CodeActEnv` whose ``search``/``read``/``neighbors`` are confined to the item's
patient (:class:`~reasonrl.envs.fhir_tools.PatientTools`). ``verify`` compares numbers (within 0.05);
the judge reward (:mod:`reasonrl.rewards.judge`) is the spec's reward beside it.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Iterator

from ..envs.codeact import CodeActEnv
from ..envs.fhir_store import ENCOUNTER_CLASSES, OBSERVATION_CODES, FhirStore, hospital_store
from ..envs.fhir_tools import TOOL_DOCS, PatientTools, SqliteBackend
from .base import Item, check_split, in_test_split, make_config

TEMPLATES = ("count", "latest", "encounters_with", "max", "mean")
QUESTIONS = {
    "count": "How many {display} observations (LOINC {code}) does patient {patient} have?",
    "latest": "What is the most recent {display} value (LOINC {code}) of patient {patient}?",
    "encounters_with": "How many {cls_display} encounters of patient {patient} have at least one {display} "
    "observation (LOINC {code})?",
    "max": "What is the highest {display} value (LOINC {code}) recorded for patient {patient}?",
    "mean": "What is the average {display} value (LOINC {code}) of patient {patient}, rounded to one decimal?",
}
GOLD_SQL = {
    "count": 'SELECT COUNT(*) FROM "Observation" WHERE patient = :patient AND code = :code',
    "latest": 'SELECT value FROM "Observation" WHERE patient = :patient AND code = :code ORDER BY date DESC LIMIT 1',
    "encounters_with": 'SELECT COUNT(DISTINCT e.id) FROM "Encounter" e JOIN "Observation" o ON o.encounter = e.id '
    "WHERE e.patient = :patient AND e.class = :cls AND o.code = :code",
    "max": 'SELECT MAX(value) FROM "Observation" WHERE patient = :patient AND code = :code',
    "mean": 'SELECT ROUND(AVG(value), 1) FROM "Observation" WHERE patient = :patient AND code = :code',
}
# the unrounded mean: a tie (x.x5) rounds either way within 0.05 of it, so both roundings are accepted
EXACT_MEAN_SQL = 'SELECT AVG(value) FROM "Observation" WHERE patient = :patient AND code = :code'
PROMPTS = {  # an item's prompt: the episode's first message
    "tools": (
        "You answer questions about a patient's FHIR health record by writing Python in ```python``` blocks.\n"
        "Tools:\n{tools}\n\nQuestion: {question}\n"
    ),
    # for a small context (the tiny reasoner's 512 positions): the tools named, not documented
    "short": "Python tools: search, read, neighbors, final_answer.\nQ: {question}\n",
}
# the scripted expert's action per template: one code cell that queries the tools and answers. A warm start
# imitates it (`reasonrl pretrain --task fhir`); each is checked against the gold SQL (tests/test_fhir.py)
DEMOS = {
    "count": "<code>final_answer(len(search('Observation', code='{code}')))</code>",
    "latest": "<code>r = search('Observation', code='{code}', _sort='-date', _count=1)\n"
    "final_answer(r[0]['valueQuantity']['value'])</code>",
    "max": "<code>final_answer(max(o['valueQuantity']['value'] for o in search('Observation', code='{code}')))</code>",
    "mean": "<code>v = [o['valueQuantity']['value'] for o in search('Observation', code='{code}')]\n"
    "final_answer(round(sum(v) / len(v), 1))</code>",
    "encounters_with": "<code>e = {{x['id'] for x in search('Encounter', **{{'class': '{cls}'}})}}\n"
    "o = {{x['encounter']['reference'].split('/')[1] for x in search('Observation', code='{code}')}}\n"
    "final_answer(len(e & o))</code>",
}
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True)
class FhirConfig:
    hospital_seed: int = 0
    n_patients: int = 40
    templates: tuple[str, ...] = TEMPLATES
    test_fraction: float = 0.2  # of the patients
    turn_timeout: float = 5.0  # seconds per code cell
    max_results: int = 50  # a search's list cap
    # PROMPTS: "short" names the tools (fits the tiny reasoner's 512 positions); "tools" documents them (a real model)
    prompt: str = "short"

    def __post_init__(self):
        object.__setattr__(self, "templates", tuple(self.templates))
        bad = sorted(set(self.templates) - set(TEMPLATES))
        if bad or not self.templates:
            raise ValueError(f"unknown fhir template(s) {bad or '(none given)'}; valid: {list(TEMPLATES)}")
        if self.prompt not in PROMPTS:
            raise ValueError(f"unknown fhir prompt {self.prompt!r}; valid: {list(PROMPTS)}")
        if not 0.0 < self.test_fraction < 1.0:
            raise ValueError(f"test_fraction must be in (0, 1), got {self.test_fraction}")


def format_number(value: float | int | None) -> str:
    """A gold value as text: integers without a decimal point, others at their one-decimal precision."""
    if value is None:
        return "none"
    return str(int(value)) if float(value).is_integer() else f"{round(float(value), 1):g}"


def gold_answer(store: FhirStore, template: str, params: dict[str, str]) -> str:
    """The template's SQL (:data:`GOLD_SQL`) over the store, as text."""
    return format_number(store.query(GOLD_SQL[template], params)[0][0])


class FhirTask:
    """Questions over a patient's FHIR record, one patient's tools per episode (module docs)."""

    name = "fhir"
    untrusted_code = True  # the model's code cells run in sandbox sessions (sandbox.require, issue 41)
    max_new_tokens = 256

    def __init__(self, **options: Any):
        self.config = make_config(FhirConfig, "fhir", options)
        self._store: FhirStore | None = None

    @property
    def store(self) -> FhirStore:
        if self._store is None:
            self._store = hospital_store(self.config.hospital_seed, self.config.n_patients)
        return self._store

    def patients(self, split: str) -> list[str]:
        """The ids of the split's patients (the held-out ones: a hash fraction of the ids)."""
        check_split(split)
        ids = [r[0] for r in self.store.query('SELECT id FROM "Patient" ORDER BY id')]
        return [p for p in ids if in_test_split(f"fhir-patient:{p}", self.config.test_fraction) == (split == "test")]

    def _params(self, rng: random.Random, template: str, patient: str) -> dict[str, str] | None:
        codes = sorted(
            r[0] for r in self.store.query('SELECT DISTINCT code FROM "Observation" WHERE patient = ?', (patient,))
        )
        if template == "count":  # sometimes a code the patient never had: the answer 0
            return {"patient": patient, "code": rng.choice(sorted(OBSERVATION_CODES))}
        if not codes:
            return None
        params = {"patient": patient, "code": rng.choice(codes)}
        if template == "encounters_with":
            params["cls"] = rng.choice(sorted(ENCOUNTER_CLASSES))
        return params

    def make_item(self, template: str, params: dict[str, str]) -> Item:
        display = OBSERVATION_CODES[params["code"]][0]
        cls_display = ENCOUNTER_CLASSES.get(params.get("cls", ""), "")
        question = QUESTIONS[template].format(display=display, cls_display=cls_display, **params)
        key = ":".join([template, *(f"{k}={params[k]}" for k in sorted(params))])
        prompt = PROMPTS[self.config.prompt].format(tools=TOOL_DOCS, question=question)
        meta = {"template": template, "question": question, **params}
        if template == "mean":
            meta["exact"] = self.store.query(EXACT_MEAN_SQL, params)[0][0]
        return Item(
            key=key,
            prompt=prompt,
            answer=gold_answer(self.store, template, params),
            meta=meta,
            demo=DEMOS[template].format(**params),
        )

    def iter_items(self, split: str, seed: int) -> Iterator[Item]:
        patients = self.patients(split)
        if not patients:
            raise ValueError(
                f"the {split} split has no patients (n_patients={self.config.n_patients}, "
                f"test_fraction={self.config.test_fraction}): raise n_patients"
            )
        rng = random.Random(f"{seed}:fhir:{split}")
        while True:
            template, patient = rng.choice(self.config.templates), rng.choice(patients)
            params = self._params(rng, template, patient)
            if params is not None:
                yield self.make_item(template, params)

    def environment(self, item: Item) -> CodeActEnv:
        tools = PatientTools(SqliteBackend(self.store), item.meta["patient"], self.config.max_results)
        env = CodeActEnv(tools.as_tools(), turn_timeout=self.config.turn_timeout)  # first message: the item's prompt
        env.fhir_tools = tools  # the calls it served or refused (tests, evidence)
        return env

    def extract_answer(self, completion: str) -> str | None:
        found = NUMBER.findall(completion)
        return format_number(float(found[-1])) if found else None

    def verify(self, completion: str, answer: str, meta: dict[str, Any]) -> float:
        got = self.extract_answer(completion)
        if got is None or answer == "none":
            return float(got is None and answer == "none" and "none" in completion.lower())
        # a mean is compared with its unrounded value: a tie rounded down (Python's round on 100.35) or up
        # (SQL's) is 0.05 from it either way
        gold = float(meta["exact"]) if meta.get("exact") is not None else float(answer)
        return float(abs(float(got) - gold) <= 0.05 + 1e-9)
