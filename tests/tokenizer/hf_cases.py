# Tokenizers under test and the inputs they are compared on, shared by the pytest oracle test and the bench.
# Each case is a directory holding tokenizer.json (from testdata, or rebuilt here from vocab/merges files with
# HF `tokenizers` itself), so our binary and the HF library read the very same file.
import json
import pathlib
import random

TOKENIZER_DIRS = ["tinyllama-1.1b-chat-v1.0", "phi-2", "phi-3-mini-4k-instruct", "falcon-7b",
                  "mistral-7b-instruct-v0.3"]


def llamacpp_inputs(testdata):
    out = []
    for inp in sorted((testdata / "llamacpp-vectors").glob("*.inp")):
        out.extend(inp.read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n"))
    seen, uniq = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            uniq.append(s)
    return uniq


def vector_inputs(testdata):
    out = []
    st = testdata / "test-vectors" / "swift-transformers"
    for f in sorted(st.glob("*_encoded*.json")):
        j = json.loads(f.read_text(encoding="utf-8"))
        if isinstance(j, dict) and isinstance(j.get("text"), str):
            out.append(j["text"])
    tt = json.loads((st / "tokenizer_tests.json").read_text(encoding="utf-8"))
    for cases in tt.values():
        for c in cases:
            out.append(c["input"])
    for f in sorted((testdata / "test-vectors" / "ggml-prompts").glob("*.txt")):
        for line in f.read_text(encoding="utf-8").splitlines():
            out.extend(p for p in line.split("\t") if p)
    enc = json.loads((testdata / "test-vectors" / "llama2c" / "llama2_encode.json").read_text(encoding="utf-8"))
    out.extend(c["text"] for c in enc["cases"])
    return out


_ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", " ", "  ", "\t", "\n", "\r\n",
    ".,;:!?'\"()[]{}<>-_/\\|@#$%^&*+=~`", "äöüßéèêàçñÄÖÜÉ", "абвгдежзийклмнопрстуфхцчшщъыьэюяАБВ",
    "αβγδεζηθικλμνξοπρστυφχψωΣΑΒ", "你好世界中文字符测试漢字", "こんにちはカタカナひらがな", "한국어텍스트",
    "مرحبابالعالم", "שלוםעולם", "हिन्दीपाठ", "ไทยภาษา", "😀😃🦙🚀👍🏽👨‍👩‍👧❤️‍🔥🇩🇪", "\u0301\u0308\u0327\u20dd",
    "\u00a0\u2000\u2003\u3000\u200b\u200d\ufeff\u180e\u2028", "ﬁﬀ①²½Ⅻ㎏ｆｕｌｌ", "'s'll're've'd'm", "\x00\x01\x1f\x7f",
]


def random_strings(n, specials, seed):
    rng = random.Random(seed)
    out = []
    for k in range(n):
        parts = []
        # Every tenth string is long (several hundred bytes): whole-text SentencePiece words, long runs.
        for _ in range(rng.randint(30, 80) if k % 10 == 9 else rng.randint(1, 12)):
            r = rng.random()
            if r < 0.08 and specials:
                parts.append(rng.choice(specials))
            elif r < 0.12 and specials:
                s = rng.choice(specials)
                parts.append(s[:-1] if len(s) > 1 else s + s)  # look-alike
            elif r < 0.16:
                parts.append(rng.choice(["a", " ", "ab", "1", "\n", "!", "🦙"]) * rng.randint(2, 40))
            else:
                alpha = rng.choice(_ALPHABETS)
                parts.append("".join(rng.choice(alpha) for _ in range(rng.randint(1, 10))))
        out.append("".join(parts))
    return out


def random_id_sequences(n, vocab_size, special_ids, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        seq = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if r < 0.05 and special_ids:
                seq.append(rng.choice(special_ids))
            elif r < 0.08:
                seq.append(rng.choice([-1, vocab_size + 5]))  # out of vocabulary: skipped
            else:
                seq.append(rng.randrange(vocab_size))
        out.append(seq)
    return out


def build_reconstructed(testdata, tmp):
    """Rebuilds tokenizer.json files from the vocab/merges files in testdata with HF `tokenizers`."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, AddedToken
    built = {}
    tk = testdata / "tokenizers"
    # GPT-2: vocab.json + merges.txt.
    t = Tokenizer(models.BPE.from_file(str(tk / "gpt2" / "vocab.json"), str(tk / "gpt2" / "merges.txt")))
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.post_processor = processors.ByteLevel(trim_offsets=False)
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    built["gpt2"] = t
    # Llama-3.2 vocabulary in GPT-2 file format, with the Llama-3 split regex.
    t = Tokenizer(models.BPE.from_file(str(tk / "llama3.2-gpt2fmt" / "encoder.json"),
                                       str(tk / "llama3.2-gpt2fmt" / "vocab.bpe"), ignore_merges=True))
    llama3_re = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(llama3_re_pattern(llama3_re), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    t.decoder = decoders.ByteLevel()
    n = t.get_vocab_size()
    t.add_special_tokens([AddedToken("<|begin_of_text|>", special=True), AddedToken("<|eot_id|>", special=True)])
    bos = t.token_to_id("<|begin_of_text|>")
    t.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])])
    built["llama3.2"] = t
    # BERT uncased: WordPiece from vocab.txt.
    t = Tokenizer(models.WordPiece.from_file(str(tk / "bert-base-uncased" / "vocab.txt"), unk_token="[UNK]"))
    t.normalizer = normalizers.BertNormalizer(lowercase=True)
    t.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    t.decoder = decoders.WordPiece()
    t.add_special_tokens([AddedToken(s, special=True) for s in ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]])
    t.post_processor = processors.BertProcessing(("[SEP]", t.token_to_id("[SEP]")), ("[CLS]", t.token_to_id("[CLS]")))
    built["bert-base-uncased"] = t
    out = {}
    for name, t in built.items():
        d = pathlib.Path(tmp) / name
        d.mkdir(parents=True, exist_ok=True)
        t.save(str(d / "tokenizer.json"))
        out[name] = d
    return out


def llama3_re_pattern(s):
    from tokenizers import Regex
    return Regex(s)


def training_corpus(testdata):
    return llamacpp_inputs(testdata) + vector_inputs(testdata)


def build_synthetic(testdata, tmp):
    """Small tokenizers trained here, each exercising the rarer components and added-token flags."""
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers,
                            processors, trainers)
    corpus = training_corpus(testdata) * 2
    built = {}

    # Unigram + NFKC/Replace(regex)/Strip + Metaspace(always, split) + byte fallback.
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(r"\s{2,}"), " "),
                                         normalizers.Strip(left=False, right=True)])
    t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    t.decoder = decoders.Sequence([decoders.Metaspace(replacement="▁", prepend_scheme="always"),
                                   decoders.ByteFallback()])
    tr = trainers.UnigramTrainer(vocab_size=400, special_tokens=["<unk>", "<s>", "</s>"], unk_token="<unk>",
                                 byte_fallback=True, initial_alphabet=list("abc"))
    t.train_from_iterator(corpus, tr)
    t.post_processor = processors.TemplateProcessing(single="<s> $A </s>",
                                                     special_tokens=[("<s>", 1), ("</s>", 2)])
    built["synthetic-unigram"] = t

    # BPE with Whitespace/Digits/Punctuation, NFD+StripAccents+Lowercase, BPEDecoder-free decoding via Fuse.
    t = Tokenizer(models.BPE(unk_token="[UNK]", fuse_unk=True, continuing_subword_prefix="##"))
    t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase()])
    t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(True),
                                               pre_tokenizers.Punctuation("contiguous")])
    t.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    tr = trainers.BpeTrainer(vocab_size=600, special_tokens=["[UNK]", "[CLS]", "[SEP]"],
                             continuing_subword_prefix="##")
    t.train_from_iterator(corpus, tr)
    t.post_processor = processors.RobertaProcessing(("[SEP]", 2), ("[CLS]", 1))
    built["synthetic-bpe-words"] = t

    # Split behaviours (every one, with invert), WhitespaceSplit, NFKD, and added-token flags.
    t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=False))
    t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Prepend("_")])
    t.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d+"), behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"[,.]"), behavior="merged_with_next"),
        pre_tokenizers.Split("-", behavior="removed"),
        pre_tokenizers.Split(Regex(r"\p{Lu}"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"[aeiou]+"), behavior="isolated", invert=True),
        pre_tokenizers.WhitespaceSplit()])
    t.decoder = decoders.Sequence([decoders.Replace("_", " "), decoders.Replace(Regex("[0-9]+"), "#"), decoders.Fuse(),
                                   decoders.Strip(" ", 1, 0)])
    tr = trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>"])
    t.train_from_iterator(corpus, tr)
    t.add_tokens([AddedToken("<tool>", lstrip=True, rstrip=True), AddedToken("word", single_word=True),
                  AddedToken("_norm", normalized=True), AddedToken("hello", special=False)])
    t.add_special_tokens([AddedToken("<|end|>", special=True, rstrip=True)])
    built["synthetic-splits"] = t

    # GPT-2 vocabulary behind NFC + Strip, ByteLevel with add_prefix_space, RoBERTa-style wrapping.
    tk = testdata / "tokenizers" / "gpt2"
    t = Tokenizer(models.BPE.from_file(str(tk / "vocab.json"), str(tk / "merges.txt")))
    t.normalizer = normalizers.Sequence([normalizers.NFC(), normalizers.Strip()])
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    t.decoder = decoders.ByteLevel()
    t.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
    t.add_tokens([AddedToken("  ", normalized=False), AddedToken("<mask>", lstrip=True, normalized=True)])
    eot = t.token_to_id("<|endoftext|>")
    t.post_processor = processors.RobertaProcessing(("<|endoftext|>", eot), ("<|endoftext|>", eot))
    built["synthetic-gpt2-prefix-space"] = t

    # SentencePiece-style BPE with byte fallback, Metaspace(prepend "first", split) and Metaspace decoding.
    t = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    t.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=True)
    t.decoder = decoders.Sequence([decoders.ByteFallback(), decoders.Metaspace(prepend_scheme="first")])
    tr = trainers.BpeTrainer(vocab_size=700, special_tokens=["<unk>", "<s>", "</s>"] +
                             [f"<0x{b:02X}>" for b in range(256)])
    t.train_from_iterator(corpus, tr)
    built["synthetic-metaspace-first"] = t

    out = {}
    for name, t in built.items():
        d = pathlib.Path(tmp) / name
        d.mkdir(parents=True, exist_ok=True)
        t.save(str(d / "tokenizer.json"))
        out[name] = d
    return out


def build_precompiled(testdata, tmp):
    """A Unigram tokenizer behind a Precompiled normalizer whose charsmap SentencePiece compiles (nmt_nfkc)."""
    import io
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    corpus = training_corpus(testdata)
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(corpus * 2), model_writer=buf, vocab_size=200,
                                   model_type="unigram", normalization_rule_name="nmt_nfkc", minloglevel=2)
    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(buf.getvalue())
    t = Tokenizer(models.Unigram())
    t.normalizer = normalizers.Sequence([normalizers.Precompiled(proto.normalizer_spec.precompiled_charsmap),
                                         normalizers.Replace(Regex(" {2,}"), " ")])
    t.pre_tokenizer = pre_tokenizers.Metaspace()
    t.decoder = decoders.Metaspace()
    t.train_from_iterator(corpus, trainers.UnigramTrainer(vocab_size=300, special_tokens=["<unk>"], unk_token="<unk>"))
    d = pathlib.Path(tmp) / "synthetic-precompiled"
    d.mkdir(parents=True, exist_ok=True)
    t.save(str(d / "tokenizer.json"))
    return {"synthetic-precompiled": d}
