"""python manage.py models: the model catalog for the hf engine."""
