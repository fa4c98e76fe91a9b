"""Load a transformers export as a user without seq2seq does (``trust_remote_code=True``) and write
what it computes; run in a separate interpreter by test_export_own_class.py:

    python -I [-S] tests/helpers/load_exported.py REQUEST.json RESULT.pt [SITE_PACKAGES ...]

REQUEST holds the folder, source and target ids for one teacher-forced batch, sentences with their
length limits, and beam search options; RESULT gets the logits of that batch, the greedy
translations, the beams generate() returns for the batch's sources, the class and the
transformers version. With ``-S``, SITE_PACKAGES are put on sys.path without running their
``.pth`` files, so an editable install of seq2seq stays out of reach. Imports nothing of seq2seq.
"""

import importlib.util
import json
import sys
from pathlib import Path


def main() -> None:
    request_file, result_file, *site_packages = sys.argv[1:]
    sys.path.extend(site_packages)
    if importlib.util.find_spec("seq2seq") is not None:
        raise SystemExit("seq2seq is importable here: this check needs an interpreter without it")
    import torch
    import transformers

    request = json.loads(Path(request_file).read_text(encoding="utf-8"))
    folder, pad = request["folder"], request["pad_id"]
    model = transformers.AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    # transformers 5 reads config.json for the tokenizer too, hence the flag here as well
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    src, tgt = torch.tensor(request["src"]), torch.tensor(request["tgt"])
    translations = []
    with torch.inference_mode():
        logits = model(
            input_ids=src, attention_mask=src != pad, decoder_input_ids=tgt, decoder_attention_mask=tgt != pad
        ).logits
        for sentence, limit in zip(request["sentences"], request["limits"], strict=True):
            out = model.generate(**tokenizer([sentence], return_tensors="pt"), max_new_tokens=limit)
            translations.append(tokenizer.decode(out[0], skip_special_tokens=True))
        beams = model.generate(input_ids=src, attention_mask=src != pad, **request["beam_search"])
    torch.save(
        {
            "logits": logits,
            "translations": translations,
            "beams": beams,
            "class": type(model).__name__,
            "module": type(model).__module__,
            "transformers": transformers.__version__,
        },
        result_file,
    )


if __name__ == "__main__":
    main()
