"""Gradient norms per layer: of any model the catalogue builds (``norms.py``, Xiong et al. 2020), the
last layer's norm against depth under every norm placement (``depth_scaling.py``, Theorem 1) and the
landing config's depth sweep stored with the code (``depth_stored.py``)."""
