"""Test helpers of the shells: a local moto SSM/STS/IAM server and a fault-injecting proxy.

Loopback only; nothing here touches the internet or ambient AWS credentials.
"""
