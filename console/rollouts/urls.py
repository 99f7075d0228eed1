from django.urls import path

from console.rollouts import views

app_name = "rollouts"

urlpatterns = [
    path("new/", views.rollout_new, name="new"),
    path("export/<str:tool>.yaml", views.rollout_export, name="export"),
    path("<int:pk>/", views.rollout_detail, name="detail"),
    path("<int:pk>/act/", views.rollout_act, name="act"),
]
