from django.urls import path

from console.decisions import views

app_name = "decisions"
urlpatterns = [
    path("", views.decision_list, name="list"),
    path("new/", views.decision_new, name="new"),
    path("archive/", views.archive_list, name="archive"),
    path("<int:pk>/", views.decision_detail, name="detail"),
    path("<int:pk>/edit/", views.decision_edit, name="edit"),
    path("<int:pk>/submit/", views.decision_submit, name="submit"),
    path("<int:pk>/sign/", views.decision_sign, name="sign"),
    path("<int:pk>/export.md", views.decision_export_markdown, name="export_md"),
    path("<int:pk>/export.pdf", views.decision_export_pdf, name="export_pdf"),
    path("<int:pk>/bundle.json", views.decision_bundle, name="bundle"),
]
