"""Operations: Prometheus, Grafana, Kubernetes and the checks that keep them true (validate.py)."""
