"""Rollouts: what production must keep showing after a decision is signed.

A guarded rollout of a signed decision evaluates the decision's rollback triggers (data:
a PromQL query, a comparison with the control pool, a threshold, a window, a minimum number
of looks, an action) against a registered Prometheus with a sequential test that holds its
false-alarm rate over repeated looks; the triggers also export as Argo Rollouts and Flagger
analysis. Rollouts belong to decisions: this app sits above ``console.decisions``.
"""
