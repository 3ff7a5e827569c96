"""Dependencies shared by the routes."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from cache_server.admin import AdminService
from cache_server.service import CacheService
from cache_server.settings import Settings

__all__ = ["AdminDep", "ServiceDep", "SettingsDep", "get_admin", "get_service", "get_settings"]


def get_service(request: Request) -> CacheService:
    service: CacheService = request.app.state.service
    return service


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_admin(request: Request) -> AdminService:
    admin: AdminService = request.app.state.admin
    return admin


ServiceDep = Annotated[CacheService, Depends(get_service)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
AdminDep = Annotated[AdminService, Depends(get_admin)]
