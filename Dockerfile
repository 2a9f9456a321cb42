# The order service image: gunicorn by default; the Celery worker and beat run
# the same image with another command (see docker-compose.yml).
# The newest Python the project supports and tests (3.11 to 3.13).
FROM python:3.13-slim

# PYTHONPATH=/app: `pip install --no-deps .` also puts the packages into
# site-packages, but every process must import the one copy in /app, where
# BASE_DIR, and so staticfiles/, is. gunicorn, celery and manage.py put the
# working directory first on sys.path on their own; this makes it hold from
# any working directory (docker run -w, exec'd one-off scripts).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONPATH=/app \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN groupadd --system --gid 10001 app \
    && useradd --system --uid 10001 --gid app --create-home --home-dir /home/app \
        --shell /usr/sbin/nologin app

WORKDIR /app

# The locked dependencies first, in their own layer: it is rebuilt only when
# requirements.lock changes, not on every source edit.
COPY requirements.lock ./
RUN pip install -r requirements.lock

COPY . .
RUN pip install --no-deps . \
    && rm -rf build ./*.egg-info

# SECRET_KEY is set for this RUN only: without it settings would generate
# var/secret_key and bake it into the image. The test fails the build if a
# key file was written all the same.
RUN SECRET_KEY=build-only-collectstatic-not-a-secret \
        python manage.py collectstatic --noinput -v0 \
    && test ! -e var/secret_key

# /app stays owned by root, so the service cannot rewrite its own code or
# static files. Numeric IDs let `runAsNonRoot` checks verify the user.
USER 10001:10001

EXPOSE 8000

# No HEALTHCHECK here: it would be inherited by the worker and beat, which
# serve no HTTP. docker-compose.yml sets one per service.
# Put nginx in front (docker-compose.yml, deploy/nginx/) rather than publish
# this port: gunicorn's threads absorb only a few clients that stall
# mid-request (config/gunicorn.py); nginx forwards only whole requests.
CMD ["gunicorn", "-c", "config/gunicorn.py", "config.wsgi:application"]
