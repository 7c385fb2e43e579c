"""Which data the loop learns from: selectors, curricula and dataset builders.

A selector decides which prompts get rollouts and which groups reach the update, with per-prompt
state keyed by the item's stable key and saved in checkpoints (shared/DESIGN.md, "Where new parts
go"). Dataset builders (demonstrations, drafts in the prompt) turn users' files into items.
"""
