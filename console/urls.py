from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import URLPattern, URLResolver, include, path

from console import views

api_patterns: list[URLPattern | URLResolver] = [
    path("openapi.json", views.openapi_json, name="openapi"),
    path("", include("console.traces.api_urls")),
    path("", include("console.experiments.api_urls")),
    path("", include("console.analysis.api_urls")),
    path("", include("console.policies.api_urls")),
    path("", include("console.decisions.api_urls")),
]

urlpatterns = [
    path("", views.home, name="home"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("traces/", include("console.traces.urls")),
    path("experiments/", include("console.experiments.urls")),
    path("analysis/", include("console.analysis.urls")),
    path("policies/", include("console.policies.urls")),
    path("decisions/", include("console.decisions.urls")),
    path("api/", include(api_patterns)),
    path("admin/", admin.site.urls),
]
