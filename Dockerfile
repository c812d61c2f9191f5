# The stratamem image the compose file's proxy and worker services run: the package and its
# command, nothing else. Build with `docker compose build` (or `docker build -t stratamem .`).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY memory memory
COPY retrieval retrieval
COPY storage storage
RUN python -m pip install --no-cache-dir . \
    && useradd --create-home --uid 10001 stratamem
USER stratamem
# The embedded database is for development: in the image, STRATAMEM_DATABASE_URL names one.
ENTRYPOINT ["stratamem"]
