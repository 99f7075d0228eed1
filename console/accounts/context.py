from console.accounts import roles as r
from console.accounts.services import user_role


def roles(request):
    """The header's roles, and what the user may start somewhere (in at least one of their teams:
    each object's page asks its own team)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {"role": None}
    return {
        "role": user_role(user),
        "can_upload_trace": user.has_perm(r.UPLOAD_TRACE),
        "can_run_experiment": user.has_perm(r.RUN_EXPERIMENT),
        "can_draft_decision": user.has_perm(r.DRAFT_DECISION),
        "can_sign_decision": user.has_perm(r.SIGN_DECISION),
    }
