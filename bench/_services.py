"""Helpers of the benchmarks (not a benchmark itself): a local S3 server (SeaweedFS) on its own
port, with one bucket, for the sittings that compare S3 with the local disk."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from tidemark_dev.s3 import S3Service, s3_environment


def start_local_s3(settings: Any, home: Path, port: int, bucket: str) -> tuple[Any, dict[str, str]]:
    """Start SeaweedFS under ``home`` on ``port`` and create ``bucket``; returns the service
    (stop it by ``.stop()``) and the ``AWS_*`` environment that reaches it."""
    import boto3

    s3_settings = replace(settings, home=home, s3_port=port)
    service = S3Service(s3_settings)
    service.start()
    try:
        env = s3_environment(s3_settings)
        boto3.client(
            "s3",
            endpoint_url=env["AWS_ENDPOINT_URL"],
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_REGION"],
        ).create_bucket(Bucket=bucket)
    except BaseException:
        service.stop()
        raise
    return service, env
