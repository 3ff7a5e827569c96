"""Routes that hand out signed URLs, so the bytes go from the bucket straight to each host."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from cache_protocol import CONTENT_LENGTH_HEADER, SHA256_HEADER
from cache_server.api.access import Scope, declare
from cache_server.api.deps import ServiceDep
from cache_server.api.schemas import KeysRequest, SignedUrlOut, SignedUrlsOut
from cache_server.auth.tokens import Role
from cache_server.service import SignedEntry

__all__ = ["redirect_to", "router"]

router = APIRouter(prefix="/v1/namespaces/{namespace}", tags=["entries"])


def redirect_to(signed: SignedEntry) -> Response:
    """A 307 to the signed URL, with the digest the downloader must check (the URL is not cacheable)."""
    return Response(
        status_code=status.HTTP_307_TEMPORARY_REDIRECT,
        headers={
            "Location": signed.url,
            "ETag": f'"{signed.sha256}"',
            SHA256_HEADER: signed.sha256,
            CONTENT_LENGTH_HEADER: str(signed.size),
            "Cache-Control": "no-store",
        },
    )


@router.post(
    "/urls",
    response_model=SignedUrlsOut,
    responses={501: {"description": "This server does not hand out signed URLs; use the bundle"}},
)
@declare(Role.READ, Scope.PATH_NAMESPACE)
def signed_urls(namespace: str, body: KeysRequest, service: ServiceDep) -> SignedUrlsOut:
    """Short-lived signed download URLs for the stored entries among these keys (each counted as a hit).

    Only when the server runs on Google Cloud Storage with ``XLA_CACHE_SIGNED_URL_SECONDS`` > 0 and
    credentials that can sign; otherwise 501 ``signed_urls_unavailable``, and ``POST .../bundle`` is the way.
    """
    result = service.sign_entries(namespace, body.keys)
    return SignedUrlsOut(
        namespace=namespace,
        expires_in=result.expires_in,
        urls={e.key: SignedUrlOut(url=e.url, size=e.size, sha256=e.sha256) for e in result.entries},
        missing=result.missing,
    )
