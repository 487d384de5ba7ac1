"""Serving engines beyond the built-in HTTP service (`laya_edge.serve`): `laya_edge.serving.ray`
runs that same service on Ray Serve replicas."""
