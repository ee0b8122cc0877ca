"""FAdamGC: federated Adam with gradient correction, FA-NT and LocalAdam."""
