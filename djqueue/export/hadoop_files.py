"""Moving the export's output files, through Hadoop's FileSystem API (Spark's own)."""

from __future__ import annotations

from typing import Any


class HadoopFiles:
    """File moves through Hadoop's FileSystem API, so a cluster's HDFS or object store
    works as well as a local directory."""

    def __init__(self, spark: Any, root: str) -> None:
        jvm = spark.sparkContext._jvm
        self.Path = jvm.org.apache.hadoop.fs.Path
        self.root = self.Path(root)
        self.fs = self.root.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())

    def has_data(self) -> bool:
        return any(not p.getName().startswith(("_", ".")) for p in self._files(""))

    def _files(self, relative: str) -> list[Any]:
        base = self.Path(self.root, relative) if relative else self.root
        if not self.fs.exists(base):
            return []
        found = []
        files = self.fs.listFiles(base, True)
        while files.hasNext():
            found.append(files.next().getPath())
        return found

    def delete_matching(self, relative: str, prefix: str) -> None:
        for path in self._files(relative):
            if path.getName().startswith(prefix):
                self.fs.delete(path, False)

    def promote(self, staging: str, relative: str, prefix: str) -> None:
        """Move the data files under ``staging`` into ``relative``, keeping partition paths."""
        base = self.Path(self.root, staging)
        base_uri = base.toUri().getPath().rstrip("/")
        for path in self._files(staging):
            name = path.getName()
            if name.startswith(("_", ".")):
                continue
            partition = path.getParent().toUri().getPath()[len(base_uri):].lstrip("/")
            target_dir = self.Path(self.Path(self.root, relative), partition or ".")
            self.fs.mkdirs(target_dir)
            self.fs.rename(path, self.Path(target_dir, prefix + name))
        self.fs.delete(base, True)
        staging_root = self.Path(self.root, "_staging")
        if self.fs.exists(staging_root) and not self.fs.listStatus(staging_root):
            self.fs.delete(staging_root, True)
