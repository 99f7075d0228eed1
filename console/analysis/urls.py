from django.urls import path

from console.analysis import views

app_name = "analysis"
urlpatterns = [
    path("experiments/<int:pk>/", views.experiment_comparison, name="comparison"),
    path("experiments/<int:pk>/recompute/", views.experiment_comparison_refresh, name="recompute"),
    path("experiments/<int:pk>/results.csv", views.experiment_results_csv, name="results-csv"),
    path("experiments/<int:pk>/comparison.json", views.experiment_summary_json, name="summary-json"),
    path("runs/<int:pk>/", views.run_detail, name="run"),
    path("results/<int:a>/vs/<int:b>/", views.result_compare, name="compare"),
]
