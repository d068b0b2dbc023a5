# Hugging Face model ids (`generate ORG/NAME`, `--model ORG/NAME`): resolved from the Hub cache, else downloaded into
# it from a fake Hub on loopback (fake_hub.py: the Hub's URLs, redirects, ETags, Range, 401 / 404). Oracles:
# transformers (AutoConfig / AutoTokenizer with HF_HUB_OFFLINE=1) reads the cache llmserve wrote, and the model
# generates exactly what the same files give from a local folder.
import hashlib
import json
import os
import subprocess

import pytest
from fake_hub import FakeHub, git_blob_sha1

REPO = "fake-org/stories"


def llmserve(llmserve_bin, env, *args):
    return subprocess.run([str(llmserve_bin), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def generate_args(model):
    return ["generate", "--model", model, "--prompt", "Once upon a time", "--max-tokens", "12", "--temperature", "0",
            "--output", "json"]


@pytest.fixture
def hub_env(tmp_path):
    return {"HF_HUB_CACHE": str(tmp_path / "cache"), "HF_HUB_OFFLINE": "0"}


def test_download_then_cache_matches_the_local_folder(llmserve_bin, stories_dir, hub_env, tmp_path):
    local = llmserve(llmserve_bin, {}, *generate_args(str(stories_dir)))
    assert local.returncode == 0, local.stderr
    with FakeHub({REPO: stories_dir}, cut_once=True) as hub:
        r = llmserve(llmserve_bin, {**hub_env, "HF_ENDPOINT": hub.url}, *generate_args(REPO))
        requests = list(hub.requests)
    assert r.returncode == 0, r.stderr
    assert r.stdout == local.stdout
    assert f"downloading {REPO} (revision main)" in r.stderr
    # The weights' transfer was cut in the middle once and resumed where it stopped.
    lfs = [q for q in requests if q[1].startswith("/lfs/") and q[0] == "GET"]
    assert len(lfs) == 2 and lfs[0][2] is None and lfs[1][2].startswith("bytes=") and lfs[1][2] != "bytes=0-"
    # huggingface_hub's layout: refs/main -> the commit, snapshot links into blobs named by ETag; README skipped.
    repo = tmp_path / "cache" / "models--fake-org--stories"
    sha = (repo / "refs" / "main").read_text()
    assert sha == hashlib.sha1(REPO.encode()).hexdigest()
    snapshot = repo / "snapshots" / sha
    names = sorted(p.name for p in snapshot.iterdir())
    assert names == sorted(p.name for p in stories_dir.iterdir() if p.suffix in (".json", ".safetensors"))
    for p in snapshot.iterdir():
        data = (stories_dir / p.name).read_bytes()
        etag = hashlib.sha256(data).hexdigest() if p.suffix == ".safetensors" else git_blob_sha1(data)
        assert p.is_symlink() and os.readlink(p) == f"../../blobs/{etag}"
        assert p.read_bytes() == data
    assert not list((repo / "blobs").glob("*.incomplete"))
    # transformers finds the model in that cache without a network.
    transformers = pytest.importorskip("transformers")
    offline = subprocess.run(
        [os.sys.executable, "-c",
         "import json, sys, transformers as t; c = t.AutoConfig.from_pretrained(sys.argv[1]); "
         "k = t.AutoTokenizer.from_pretrained(sys.argv[1]); print(json.dumps([c.vocab_size, k.encode('Once')]))",
         REPO], capture_output=True, text=True, timeout=120, env={**os.environ, **hub_env, "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr
    assert transformers is not None and json.loads(offline.stdout)[0] == 512
    # A second run needs no Hub: the cache answers (offline, and with no server at all).
    again = llmserve(llmserve_bin, {**hub_env, "HF_HUB_OFFLINE": "1"}, *generate_args(REPO))
    assert again.returncode == 0 and again.stdout == local.stdout and "downloading" not in again.stderr


def test_gated_repo_needs_the_token(llmserve_bin, stories_dir, hub_env):
    with FakeHub({REPO: stories_dir}, gated_token="s3cret") as hub:
        env = {**hub_env, "HF_ENDPOINT": hub.url}
        r = llmserve(llmserve_bin, env, *generate_args(REPO))
        assert r.returncode == 1 and "HTTP 401" in r.stderr and "HF_TOKEN" in r.stderr, r.stderr
        ok = llmserve(llmserve_bin, {**env, "HF_TOKEN": "s3cret"}, *generate_args(REPO))
        assert ok.returncode == 0, ok.stderr


def test_checksum_mismatch_is_refused_and_nothing_is_linked(llmserve_bin, stories_dir, hub_env, tmp_path):
    with FakeHub({REPO: stories_dir}, corrupt="config.json") as hub:
        r = llmserve(llmserve_bin, {**hub_env, "HF_ENDPOINT": hub.url}, *generate_args(REPO))
    assert r.returncode == 1 and "config.json: the downloaded bytes do not match the Hub's checksum" in r.stderr
    repo = tmp_path / "cache" / "models--fake-org--stories"
    assert not (repo / "refs" / "main").exists()
    assert not list((repo / "blobs").glob("*.incomplete"))


def test_unknown_ids_revisions_and_offline_misses(llmserve_bin, stories_dir, hub_env):
    with FakeHub({REPO: stories_dir}) as hub:
        env = {**hub_env, "HF_ENDPOINT": hub.url}
        r = llmserve(llmserve_bin, env, *generate_args("fake-org/missing"))
        assert r.returncode == 1 and "fake-org/missing" in r.stderr and "not found on the Hub" in r.stderr
        r = llmserve(llmserve_bin, env, *generate_args(REPO), "--revision", "v9")
        assert r.returncode == 1 and "not found on the Hub" in r.stderr
    r = llmserve(llmserve_bin, {**hub_env, "HF_HUB_OFFLINE": "1"}, *generate_args(REPO))
    assert r.returncode == 1 and "HF_HUB_OFFLINE forbids downloading it" in r.stderr
    r = llmserve(llmserve_bin, hub_env, *generate_args("not/a/model/id"))
    assert r.returncode == 1 and "no such file or folder (nor a Hugging Face model id)" in r.stderr


def test_serve_resolves_the_id_before_listening_and_serves_it_by_name(llmserve_bin, stories_dir, hub_env):
    with FakeHub({REPO: stories_dir}) as hub:
        proc = subprocess.Popen([str(llmserve_bin), "serve", REPO, "--port", "0"], stderr=subprocess.PIPE, text=True,
                                env={**os.environ, **hub_env, "HF_ENDPOINT": hub.url})
        try:
            lines = []
            for line in proc.stderr:
                lines.append(line)
                if "serving" in line:
                    break
            text = "".join(lines)
            assert text.index("downloading") < text.index("listening"), text
            assert f"serving {REPO} on" in text
        finally:
            proc.terminate()
            proc.wait(timeout=30)
