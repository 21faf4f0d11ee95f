"""Static files: plotly.js from the installed package, and their hashed, compressed copies.

`collectstatic` (the image's build, `make run`) writes each file under a name carrying its content
hash (`plotly.min.<hash>.js`) with `.br` and `.gz` siblings; whitenoise serves those names with a
year's `Cache-Control: immutable` and the smallest encoding the browser accepts (plotly.min.js is
4.8 MB, 1.1 MB as brotli). Pages name files through `{% static %}`, which looks the hash up in
the manifest collectstatic wrote.
"""
from __future__ import annotations

from importlib.util import find_spec
from pathlib import Path
from typing import Any

from django.contrib.staticfiles.finders import BaseFinder
from django.core.checks import Error
from django.core.files.storage import FileSystemStorage
from whitenoise.compress import Compressor
from whitenoise.storage import CompressedManifestStaticFilesStorage

PLOTLY_PREFIX = "vendor/plotly"
PLOTLY_FILE = "plotly.min.js"


class PlotlyFinder(BaseFinder):
    """plotly.js as shipped inside the pinned `plotly` package, at vendor/plotly/plotly.min.js: no
    CDN and no copy in the repository. Only that file: the package's folder also holds a 5 MB
    widget bundle and data sets that no page uses."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        spec = find_spec("plotly")  # locates the package without importing it
        self.location = Path(spec.origin).parent / "package_data" if spec and spec.origin else None

    def check(self, **kwargs: Any) -> list[Error]:
        if self.location is None or not (self.location / PLOTLY_FILE).is_file():
            return [Error("plotly.js is not installed: the plotly package (requirements.txt) is missing",
                          hint="make install", id="gpuplane.E001")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> str | list[str]:
        if self.location is None or path != f"{PLOTLY_PREFIX}/{PLOTLY_FILE}":
            return [] if find_all else ""
        found = str(self.location / PLOTLY_FILE)
        return [found] if find_all else found

    def list(self, ignore_patterns: Any) -> Any:
        if self.location is None:
            return
        storage = FileSystemStorage(location=self.location)
        storage.prefix = PLOTLY_PREFIX  # read by collectstatic and whitenoise
        yield PLOTLY_FILE, storage


class TunedCompressor(Compressor):
    """whitenoise's compressor at a chosen brotli quality (0-11). 11, whitenoise's, takes ~8
    CPU-seconds for plotly.js (1.11 MB); 9 takes half a second (1.23 MB). `make run` collects at 9,
    the image at 11 (GPUPLANE_STATIC_BROTLI_QUALITY): build time is cheap, every page load is not."""

    def __init__(self, *args: Any, brotli_quality: int = 9, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.brotli_quality = brotli_quality

    def compress_brotli(self, data: bytes) -> bytes:
        import brotli

        return bytes(brotli.compress(data, quality=self.brotli_quality))


class CompressedManifestStorage(CompressedManifestStaticFilesStorage):
    """whitenoise's hashed and compressed storage, with two changes.

    - A hashed file whose compressed siblings exist is not compressed again: the same name means
      the same content, so a `make run` after the first collects in about a second.
    - Brotli at the quality of STATIC_BROTLI_QUALITY (TunedCompressor).
    - Where the finders serve the originals too (`make run`, tests; not production), a file
      missing from the manifest (collectstatic not run yet) is named as it is, not a server error.
    """

    @property
    def keep_only_hashed_files(self) -> bool:
        # Only hashed names are kept (and compressed), so a name always stands for one content.
        return True

    def create_compressor(self, **kwargs: Any) -> Compressor:
        from django.conf import settings

        return TunedCompressor(brotli_quality=getattr(settings, "STATIC_BROTLI_QUALITY", 9), **kwargs)

    def compress_files(self, paths: Any) -> Any:
        return super().compress_files([path for path in paths if not self._compressed_already(path)])

    def _compressed_already(self, path: str) -> bool:
        from whitenoise.compress import brotli_installed

        extensions = [".gz", ".br"] if brotli_installed else [".gz"]
        return all(self.exists(path + ext) for ext in extensions)

    def stored_name(self, name: str) -> str:
        from django.conf import settings

        try:
            return str(super().stored_name(name))
        except ValueError:
            if getattr(settings, "WHITENOISE_USE_FINDERS", False):
                return name
            raise
