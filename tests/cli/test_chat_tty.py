# `llmserve chat` on a real pseudo-terminal, typed at as a person would: the banner, /help (never sent to the
# model), Ctrl-C stopping a reply while the conversation goes on, /reset asking first, an unknown command, the Up
# arrow recalling the last line (libedit's history), and Ctrl-D quitting cleanly.
import os
import pty
import select
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Terminal:
    def __init__(self, argv):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: the chat, its stdin / stdout / stderr the terminal
            os.chdir(REPO)
            os.execv(argv[0], argv)
        self.seen = b""

    def expect(self, needle, timeout=60):
        deadline = time.time() + timeout
        while needle.encode() not in self.seen:
            left = deadline - time.time()
            assert left > 0, f"{needle!r} not seen in:\n{self.seen.decode(errors='replace')[-3000:]}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 4096)
                except OSError:  # the child closed the terminal
                    chunk = b""
                if not chunk:
                    assert needle.encode() in self.seen, self.seen.decode(errors="replace")[-3000:]
                self.seen += chunk
        at = self.seen.index(needle.encode()) + len(needle)
        before, self.seen = self.seen[:at], self.seen[at:]
        return before.decode(errors="replace")

    def send(self, text):
        os.write(self.fd, text.encode())

    def wait(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                return os.waitstatus_to_exitcode(status)
            # Read only what is there: a blocking read on a child that neither writes nor exits never returns.
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if ready:
                try:
                    self.seen += os.read(self.fd, 4096)
                except OSError:
                    time.sleep(0.05)
        os.kill(self.pid, 9)
        raise AssertionError("chat did not exit")


def test_chat_on_a_terminal(llmserve_bin, testdata):
    tok = testdata / "tokenizers" / "tinyllama-1.1b-chat-v1.0"
    # A 110M-parameter dummy model: replies slow enough (tens of tokens/s) to be stopped mid-way.
    t = Terminal([str(llmserve_bin), "chat", "--load-format", "dummy", "--config", "bench/configs/llama2-110m.json",
                  "--tokenizer", str(tok), "--max-tokens", "400", "--ignore-eos", "--temperature", "0",
                  "--num-threads", "1", "--max-model-len", "1024"])
    t.expect("llmserve chat with")
    t.expect("/help for commands.")
    t.expect("> ")
    t.send("/help\r")
    t.expect("/reset  start a new conversation (asks first)")
    t.expect("> ")
    t.send("Tell me a story\r")
    t.expect("Tell me a story")  # the terminal's echo
    time.sleep(1.0)  # a few tokens of the reply
    t.send("\x03")  # Ctrl-C
    stopped = t.expect("[stopped]")
    assert len(stopped.strip()) > 0
    t.expect("> ")
    t.send("/reset\r")
    t.expect("Start a new conversation? [y/N] ")
    t.send("n\r")
    t.expect("kept the conversation")
    t.send("/reset\r")
    t.expect("[y/N] ")
    t.send("y\r")
    t.expect("new conversation")
    t.send("/nope\r")
    t.expect("unknown command /nope: /help lists them")
    t.expect("> ")
    t.send("\x1b[A\r")  # Up: the last line again
    t.expect("unknown command /nope")
    t.expect("> ")
    # Ctrl-D on an empty line, a moment after the prompt as a person types it: a control character that arrives
    # between the prompt's write and the line editor's switch to raw mode is taken by the kernel's canonical-mode
    # line discipline (an EOF there is lost), which a loaded CI machine once hit.
    time.sleep(0.3)
    t.send("\x04")
    assert t.wait() == 0
