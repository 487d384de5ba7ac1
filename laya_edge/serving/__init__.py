"""The integrations that serve laya_edge to other programs: the HTTP service
(`laya_edge.serving.http`, `laya-edge serve`), the same service on Ray Serve replicas
(`laya_edge.serving.ray`), and answering through a Triton Inference Server
(`laya_edge.serving.triton`)."""
