from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

from console import views
from console.accounts import views as account_views
from console.analysis.api import router as analysis_api
from console.api import api, guarded_urls
from console.decisions.api import router as decisions_api
from console.experiments.api import router as experiments_api
from console.policies.api import router as policies_api
from console.rollouts.api import router as rollouts_api
from console.traces.api import router as traces_api

for router in (traces_api, experiments_api, analysis_api, policies_api, decisions_api, rollouts_api):
    api.add_router("/", router)

api_patterns: list[URLPattern | URLResolver] = guarded_urls()

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", account_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/", include("console.accounts.urls")),
    path("traces/", include("console.traces.urls")),
    path("experiments/", include("console.experiments.urls")),
    path("analysis/", include("console.analysis.urls")),
    path("policies/", include("console.policies.urls")),
    path("decisions/", include("console.decisions.urls")),
    path("decisions/<int:decision>/rollouts/", include("console.rollouts.urls")),
    path("api/docs/", views.api_docs, name="api-docs"),
    path("api/", include(api_patterns)),
    path("admin/", admin.site.urls),
]
