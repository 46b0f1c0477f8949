"""Airflow: DAG builders per kind, the custom operator and the health pages' web app."""
