"""Tenants, the principals that act in them, and their API tokens."""

import hashlib

from django.db import models


class Tenant(models.Model):
    """An isolated customer of the service: nothing crosses tenants."""

    slug = models.SlugField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Principal(models.Model):
    """A client that authenticates and sends commands, in exactly one tenant."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="principals")
    name = models.CharField(max_length=100)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="principal_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    # DRF's IsAuthenticated asks request.user this.
    @property
    def is_authenticated(self) -> bool:
        return True


class ApiToken(models.Model):
    """A bearer token, stored only as its SHA-256 digest.

    A plain digest, not a slow password hash, is right here: tokens carry
    256 random bits, so there is nothing to brute-force, and every request
    looks one up.
    """

    principal = models.ForeignKey(Principal, on_delete=models.CASCADE, related_name="tokens")
    digest = models.CharField(max_length=64, unique=True)
    # The first characters, to tell tokens apart in the admin and logs.
    prefix = models.CharField(max_length=12)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.principal})"

    @staticmethod
    def digest_of(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()
