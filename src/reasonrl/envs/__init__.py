"""Environments of multi-turn episodes (:mod:`reasonrl.rollout.multiturn`): the protocol, a scripted
environment for tests and examples, and the CodeAct harness (code actions in a persistent sandbox)."""

from .base import Environment, ScriptedEnv
from .codeact import CodeActEnv, extract_code

__all__ = ["CodeActEnv", "Environment", "ScriptedEnv", "extract_code"]
