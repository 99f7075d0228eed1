from django.urls import path

from console.policies import views

app_name = "policies"
urlpatterns = [
    path("", views.policy_list_view, name="list"),
    path("new/", views.policy_new, name="new"),
    path("<int:pk>/", views.policy_detail, name="detail"),
    path("<int:pk>/adopt/", views.policy_adopt_view, name="adopt"),
    path("<int:pk>/rules.json", views.policy_rules_json, name="rules-json"),
    path("<int:pk>/vllm-serve.sh", views.policy_serve_sh, name="serve-sh"),
    path("<int:pk>/litellm.yaml", views.policy_router_yaml, name="router-yaml"),
    path("schedule/<int:pk>/", views.experiment_schedule_view, name="schedule"),
    path("schedule/<int:pk>/schedule.json", views.experiment_schedule_json, name="schedule-json"),
]
