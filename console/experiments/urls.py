from django.urls import path

from console.experiments import views

app_name = "experiments"
urlpatterns = [
    path("", views.experiment_list, name="list"),
    path("new/", views.experiment_new, name="new"),
    path("<int:pk>/", views.experiment_detail, name="detail"),
    path("<int:pk>/live/", views.experiment_live, name="live"),
    path("<int:pk>/start/", views.experiment_start_view, name="start"),
    path("<int:pk>/cancel/", views.experiment_cancel_view, name="cancel"),
    path("<int:pk>/clone/", views.experiment_clone_view, name="clone"),
    path("<int:pk>/runs/<int:run_pk>/retry/", views.run_retry_view, name="retry"),
]
