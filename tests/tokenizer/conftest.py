# Makes hf_cases importable from the tokenizer tests.
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
