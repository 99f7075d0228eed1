from django.urls import path

from console.traces import views

app_name = "traces"
urlpatterns = [
    path("", views.trace_list_view, name="list"),
    path("upload/", views.trace_upload_view, name="upload"),
    path("<int:pk>/", views.trace_detail_view, name="detail"),
    path("<int:pk>/delete/", views.trace_delete_view, name="delete"),
]
