"""Every bad input to `lsgd train` stops it before any worker starts: exit code 2, a
message naming the value, the option (or key) and the fix, and no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import lsgd
from lsgd.cli import main

REPO = Path(__file__).resolve().parents[2]
#: Fast and found on every machine; a case's own --dataset comes later and wins.
BASE = ["train", "--dataset", "synthetic", "--quiet"]
FASHION_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                 "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
CONFIGS = {
    "section.toml": "[general]\nlr = 0.1\n",
    "unknown.toml": "lr = 0.1\nlearning-rate = 0.1\n",
    "sync-buffers-false.toml": "sync-buffers = false\n",
    "pull.toml": 'pull = "a lot"\n',
    "workers.toml": "workers = 2.5\n",
    "nesterov.toml": 'nesterov = "yes"\n',
    "drops.toml": "drops = 30\nschedule = \"step\"\n",
    "lr.toml": "lr = true\n",
    "straggle.toml": 'straggle = "1:2"\n',
    "nan.toml": "lr = nan\n",
    "broken.toml": "lr = = 0.1\n",
    "easgd.toml": 'method = "easgd"\n',
    # intervals, counts and budgets in their TOML forms
    "eval-zero.toml": "eval-every = 0\n",
    "eval-zero-seconds.toml": 'eval-every = "0s"\n',
    "eval-negative.toml": "eval-every = -30\n",
    "eval-huge.toml": "eval-every = 10000000000\n",
    "eval-word.toml": 'eval-every = "often"\n',
    "checkpoint-negative.toml": "checkpoint-every = -5\n",
    "checkpoint-huge.toml": "checkpoint-every = 99999999999\n",
    "period-zero.toml": "period = 0\n",
    "period-word.toml": 'period = "sixteen"\n',
    "global-period-negative.toml": "global-period = -64\ngroups = 2\n",
    "gossip-period-huge.toml": 'method = "dpsgd"\ngossip-period = 10000000000\n',
    "leader-window-zero.toml": "leader-window = 0\n",
    "steps-negative.toml": "steps = -10\n",
    "steps-fraction.toml": "steps = 10.5\n",
    "epochs-zero.toml": "epochs = 0\n",
    "epochs-huge.toml": "epochs = 1e300\n",
    "minutes-word.toml": 'minutes = "ten"\n',
    "minutes-inf.toml": "minutes = inf\n",
    "overlap-negative.toml": "overlap = -2\n",
    "overlap-fraction.toml": "overlap = 2.5\n",
    "fragments-zero.toml": 'method = "diloco"\nfragments = 0\n',
    "compress-zip.toml": 'compress = "zip"\n',
}

# (id, arguments after BASE, what stderr must name); "{tmp}" stands for the test's folder.
CASES = [
    # numbers: not finite, or out of range
    ("lr-nan", ["--lr", "nan"], ["--lr", "nan", "finite number > 0"]),
    ("lr-inf", ["--lr", "inf"], ["--lr", "inf"]),
    ("lr-minus-inf", ["--lr=-inf"], ["--lr", "-inf"]),
    ("lr-zero", ["--lr", "0"], ["--lr", "0.0"]),
    ("momentum-nan", ["--momentum", "nan"], ["--momentum", "nan", "[0, 1)"]),
    ("momentum-one", ["--momentum", "1"], ["--momentum", "1.0"]),
    ("momentum-negative", ["--momentum", "-0.5"], ["--momentum", "-0.5"]),
    ("weight-decay-nan", ["--weight-decay", "nan"], ["--weight-decay", "nan"]),
    ("weight-decay-negative", ["--weight-decay", "-1"], ["--weight-decay", "-1.0"]),
    ("drop-factor-nan", ["--drop-factor", "nan"], ["--drop-factor", "nan", "(0, 1)"]),
    ("drop-factor-zero", ["--drop-factor", "0"], ["--drop-factor", "0.0"]),
    ("drop-factor-above-one", ["--drop-factor", "2"], ["--drop-factor", "2.0"]),
    ("warmup-nan", ["--warmup-epochs", "nan"], ["--warmup-epochs", "nan"]),
    ("warmup-negative", ["--warmup-epochs", "-1"], ["--warmup-epochs", "-1.0"]),
    ("timeout-nan", ["--timeout", "nan"], ["--timeout", "nan"]),
    ("timeout-inf", ["--timeout", "inf"], ["--timeout", "inf"]),
    ("pull-nan", ["--pull", "nan"], ["--pull", "nan", "[0, 1]"]),
    ("scope-nan", ["--scope", "nan"], ["--scope", "nan"]),
    ("pull-global-inf", ["--pull-global", "inf", "--groups", "2"], ["--pull-global", "inf"]),
    ("scope-global-negative", ["--scope-global", "-1", "--groups", "2"],
     ["--scope-global", "-1.0"]),
    ("moving-rate-nan", ["--method", "easgd", "--moving-rate", "nan"], ["--moving-rate", "nan"]),
    ("leader-momentum-one", ["--leader-momentum", "1"], ["--leader-momentum", "1.0", "[0, 1)"]),
    ("pull-decay-rounds-negative", ["--pull-decay-rounds", "-1"],
     ["--pull-decay-rounds", "-1", "[0, "]),
    ("scope-pull-unknown", ["--scope-pull", "before"], ["--scope-pull", "before", "algorithm-1"]),
    ("bn-buffers-unknown", ["--bn-buffers", "mean"], ["--bn-buffers", "mean", "average"]),
    ("bn-buffers-not-the-methods", ["--method", "dpsgd", "--bn-buffers", "average"],
     ["--bn-buffers average", "--method dpsgd takes pull, local"]),
    ("bn-buffers-allreduce", ["--method", "allreduce", "--bn-buffers", "pull"],
     ["--bn-buffers pull", "broadcast, local"]),
    ("no-sync-buffers", ["--no-sync-buffers"], ["unrecognized arguments: --no-sync-buffers"]),
    ("budget-nan", ["--method", "matcha", "--budget", "nan"], ["--budget", "nan", "(0, 1]"]),
    ("budget-zero", ["--method", "matcha", "--budget", "0"], ["--budget", "0.0"]),
    ("mixing-weight-nan", ["--method", "dpsgd", "--mixing-weight", "nan"],
     ["--mixing-weight", "nan", "auto, max-degree or a number in (0, 1]"]),
    ("mixing-weight-negative", ["--method", "dpsgd", "--mixing-weight", "-0.5"],
     ["--mixing-weight", "-0.5"]),
    ("mixing-weight-inf", ["--method", "dpsgd", "--mixing-weight", "inf"],
     ["--mixing-weight", "inf"]),
    ("mixing-weight-word", ["--method", "dpsgd", "--mixing-weight", "heavy"],
     ["--mixing-weight", "heavy"]),
    ("c-b-nan", ["--method", "al-dsgd", "--c-b", "nan"], ["--c-b", "nan"]),
    ("c-d-inf", ["--method", "al-dsgd", "--c-d", "inf"], ["--c-d", "inf"]),
    ("p-b-negative", ["--method", "al-dsgd", "--p-b", "-1"], ["--p-b", "-1.0"]),
    ("p-d-above-one", ["--method", "al-dsgd", "--p-d", "2"], ["--p-d", "2.0"]),
    ("epochs-inf", ["--epochs", "inf"], ["--epochs", "inf"]),
    ("epochs-nan", ["--epochs", "nan"], ["--epochs", "nan"]),
    ("minutes-nan", ["--minutes", "nan"], ["--minutes", "nan"]),
    ("minutes-negative", ["--minutes", "-1"], ["--minutes", "-1.0"]),
    ("drops-nan", ["--schedule", "step", "--drops", "30", "nan"], ["--drops", "nan"]),
    ("drops-negative", ["--schedule", "step", "--drops", "-5"], ["--drops", "-5"]),
    ("drops-inf", ["--schedule", "step", "--drops", "inf"], ["--drops", "inf"]),
    ("drops-missing", ["--schedule", "step"], ["--schedule", "step", "--drops"]),
    # integers
    ("workers-zero", ["--workers", "0"], ["--workers", "0", "positive integer"]),
    ("groups-not-dividing", ["--workers", "4", "--groups", "3"], ["--groups 3", "--workers 4"]),
    ("replica-unknown", ["--replica", "rack"], ["--replica", "rack", "process", "node"]),
    ("replica-groups-not-dividing", ["--workers", "6", "--groups", "4", "--replica", "node"],
     ["--groups 4", "--workers 6", "--replica node"]),
    ("replica-hierarchical", ["--method", "local-sgd", "--hierarchical", "--groups", "2",
                              "--replica", "node"], ["--hierarchical", "--replica node"]),
    ("batch-size-zero", ["--batch-size", "0"], ["--batch-size", "0"]),
    ("batch-size-too-big", ["--batch-size", "100000"], ["batch_size=100000", "shard"]),
    ("period-zero", ["--period", "0"], ["--period", "0"]),
    ("gossip-period-zero", ["--method", "dpsgd", "--gossip-period", "0"], ["--gossip-period", "0"]),
    ("steps-zero", ["--steps", "0"], ["--steps", "0"]),
    ("global-period-zero", ["--groups", "2", "--global-period", "0"], ["--global-period", "0"]),
    ("global-period-not-multiple", ["--groups", "2", "--global-period", "20"],
     ["--global-period 20", "--period 16"]),
    ("patience-zero", ["--patience", "0"], ["--patience", "0"]),
    ("leader-window-zero", ["--leader-window", "0"], ["--leader-window", "0"]),
    ("checkpoint-every-negative", ["--checkpoint-every", "-1"], ["--checkpoint-every", "-1"]),
    ("bn-recalibrate-negative", ["--bn-recalibrate", "-1"], ["--bn-recalibrate", "-1"]),
    ("workers-word", ["--workers", "four"], ["--workers", "four"]),
    ("straggle-rank", ["--straggle", "7:2"], ["--straggle", "7:2", "[0, 4)"]),
    ("straggle-factor", ["--straggle", "1:0.5"], ["--straggle", "1:0.5", ">= 1"]),
    ("straggle-nan", ["--straggle", "1:nan"], ["--straggle", "1:nan"]),
    ("eval-every-word", ["--eval-every", "soon"], ["--eval-every", "soon"]),
    # intervals and counts: zero, negative, huge, not a number (each must also never hang)
    ("eval-every-zero", ["--eval-every", "0"], ["--eval-every '0'", "above 0"]),
    ("eval-every-zero-seconds", ["--eval-every", "0s"], ["--eval-every '0s'", "above 0"]),
    ("eval-every-negative", ["--eval-every=-30s"], ["--eval-every '-30s'", "whole number"]),
    ("eval-every-fraction-of-a-step", ["--eval-every", "2.5"], ["--eval-every '2.5'"]),
    ("eval-every-huge", ["--eval-every", "10000000000"],
     ["--eval-every '10000000000'", "at most 1000000000"]),
    ("checkpoint-every-huge", ["--checkpoint-every", "99999999999"],
     ["--checkpoint-every", "99999999999", "[0, 1000000000]"]),
    ("checkpoint-every-word", ["--checkpoint-every", "often"], ["--checkpoint-every", "often"]),
    ("period-negative", ["--period=-16"], ["--period", "-16"]),
    ("period-huge", ["--period", "99999999999"], ["--period", "99999999999", "at most"]),
    ("period-word", ["--period", "x"], ["--period", "'x'"]),
    ("global-period-negative", ["--groups", "2", "--global-period=-64"],
     ["--global-period", "-64"]),
    ("global-period-huge", ["--groups", "2", "--global-period", "16000000000"],
     ["--global-period", "16000000000"]),
    ("global-period-word", ["--global-period", "x"], ["--global-period", "'x'"]),
    ("gossip-period-negative", ["--method", "dpsgd", "--gossip-period=-1"],
     ["--gossip-period", "-1"]),
    ("gossip-period-huge", ["--method", "dpsgd", "--gossip-period", "10000000000"],
     ["--gossip-period", "10000000000"]),
    ("gossip-period-word", ["--method", "dpsgd", "--gossip-period", "x"],
     ["--gossip-period", "'x'"]),
    ("leader-window-negative", ["--leader-window=-10"], ["--leader-window", "-10"]),
    ("leader-window-huge", ["--leader-window", "10000000000"],
     ["--leader-window", "10000000000"]),
    ("leader-window-word", ["--leader-window", "ten"], ["--leader-window", "'ten'"]),
    ("steps-negative", ["--steps=-1"], ["--steps", "-1"]),
    ("steps-huge", ["--steps", "10000000000"], ["--steps", "10000000000", "at most"]),
    ("steps-word", ["--steps", "many"], ["--steps", "'many'"]),
    ("epochs-zero", ["--epochs", "0"], ["--epochs", "0.0", "(0, 1000000]"]),
    ("epochs-negative", ["--epochs=-1"], ["--epochs", "-1.0"]),
    ("epochs-huge", ["--epochs", "1e300"], ["--epochs", "1e+300"]),
    ("epochs-word", ["--epochs", "one"], ["--epochs", "'one'"]),
    ("minutes-zero", ["--minutes", "0"], ["--minutes", "0.0"]),
    ("minutes-inf", ["--minutes", "inf"], ["--minutes", "inf"]),
    ("minutes-huge", ["--minutes", "1e300"], ["--minutes", "1e+300"]),
    ("minutes-word", ["--minutes", "ten"], ["--minutes", "'ten'"]),
    ("timeout-huge", ["--timeout", "1e300"], ["--timeout", "1e+300", "(0, 10000000]"]),
    ("workers-huge", ["--workers", "5000"], ["--workers", "5000", "at most 1024"]),
    # names
    ("method", ["--method", "foo"], ["--method", "'foo'"]),
    ("optimizer", ["--optimizer", "foo"], ["--optimizer", "'foo'"]),
    ("schedule", ["--schedule", "foo"], ["--schedule", "'foo'"]),
    ("backend", ["--backend", "foo"], ["--backend", "'foo'"]),
    ("model", ["--model", "foo"], ["--model foo", "choose one of"]),
    ("dataset", ["--dataset", "foo"], ["--dataset foo", "choose one of"]),
    ("augment", ["--augment", "foo"], ["--augment foo", "choose one of"]),
    ("link", ["--link", "foo"], ["--link", "'foo'", "RATE"]),
    ("async-synchronous-method", ["--method", "allreduce", "--async"],
     ["--async", "allreduce"]),
    # graphs
    ("topology-kind", ["--method", "dpsgd", "--topology", "foo"], ["--topology", "'foo'"]),
    ("topology-option", ["--method", "dpsgd", "--topology", "ring:foo=1"],
     ["--topology", "ring:foo=1", "'foo'"]),
    ("topology-value", ["--method", "dpsgd", "--topology", "ring:stride=abc"],
     ["--topology", "'abc'"]),
    ("topology-file", ["--method", "dpsgd", "--topology", "{tmp}/edges.txt"],
     ["--topology", "{tmp}/edges.txt", "does not exist"]),
    ("graphs-kind", ["--method", "dpsgd", "--graphs", "ring", "foo"], ["--graphs", "'foo'"]),
    ("topology-disconnected", ["--method", "dpsgd", "--topology", "{tmp}/two.txt"],
     ["--topology", "connected"]),
    # datasets
    ("cifar-missing-folder", ["--dataset", "cifar10", "--data-dir", "/nonexistent/cifar"],
     ["--dataset cifar10", "--data-dir /nonexistent/cifar (no such folder)", "data_batch_1"]),
    ("cifar-incomplete", ["--dataset", "cifar10", "--data-dir", "{tmp}/cifar"],
     ["--dataset cifar10", "--data-dir {tmp}/cifar", "data_batch_2", "test_batch"]),
    ("cifar100-incomplete", ["--dataset", "cifar100", "--data-dir", "{tmp}/cifar"],
     ["--dataset cifar100", "--data-dir {tmp}/cifar", "cifar-100-python"]),
    ("fashion-missing-folder", ["--dataset", "fashion-mnist", "--data-dir", "/nonexistent/fm"],
     ["--dataset fashion-mnist", "--data-dir /nonexistent/fm", "train-images-idx3-ubyte"]),
    ("fashion-empty-files", ["--dataset", "fashion-mnist", "--data-dir", "{tmp}/fashion"],
     ["--dataset fashion-mnist", "--data-dir {tmp}/fashion", "cannot read"]),
    ("data-dir-a-file", ["--dataset", "cifar10", "--data-dir", "{tmp}/file"],
     ["--data-dir {tmp}/file (not a folder)"]),
    ("imagenet-missing-folder", ["--dataset", "imagenet", "--data-dir", "/nonexistent/in"],
     ["--dataset imagenet", "--data-dir /nonexistent/in", "train/"]),
    # the run folder
    ("out-under-a-file", ["--out", "{tmp}/file/run"],
     ["--out {tmp}/file/run", "cannot create or write", "choose another --out"]),
    ("out-already-a-run", ["--out", "{tmp}/run"], ["{tmp}/run already holds a run", "--resume"]),
    # --resume
    ("resume-not-a-run", ["--resume", "{tmp}/cifar"], ["--resume {tmp}/cifar", "no run there"]),
    ("resume-missing", ["--resume", "{tmp}/nowhere"], ["--resume {tmp}/nowhere", "no run there"]),
    ("resume-method", ["--resume", "{tmp}/run", "--method", "easgd"],
     ["--resume {tmp}/run", "trained with --method lsgd", "asks for easgd", "drop --method"]),
    ("resume-model", ["--resume", "{tmp}/run", "--model", "cnn7"],
     ["trained with --model mlp", "asks for cnn7", "drop --model"]),
    ("resume-dataset", ["--resume", "{tmp}/run", "--dataset", "digits"],
     ["trained with --dataset synthetic", "asks for digits", "drop --dataset"]),
    ("resume-workers", ["--resume", "{tmp}/run", "--workers", "4"],
     ["trained with --workers 2", "asks for 4", "drop --workers"]),
    ("resume-groups", ["--resume", "{tmp}/run", "--groups", "2"],
     ["trained with --groups 1", "asks for 2", "drop --groups"]),
    ("resume-config-method", ["--resume", "{tmp}/run", "--config", "{tmp}/easgd.toml"],
     ["trained with --method lsgd", "asks for easgd (method in {tmp}/easgd.toml)"]),
    # --config
    ("config-section", ["--config", "{tmp}/section.toml"],
     ["{tmp}/section.toml", "[general]", "top level"]),
    ("config-unknown-key", ["--config", "{tmp}/unknown.toml"],
     ["{tmp}/unknown.toml", "unknown setting(s) learning-rate"]),
    ("config-sync-buffers-false", ["--config", "{tmp}/sync-buffers-false.toml"],
     ["{tmp}/sync-buffers-false.toml", "sync_buffers = false is no longer a setting",
      'write bn_buffers = "local" instead']),
    ("config-pull-text", ["--config", "{tmp}/pull.toml"],
     ['pull = "a lot" in {tmp}/pull.toml: expected a number']),
    ("config-workers-fraction", ["--config", "{tmp}/workers.toml"],
     ["workers = 2.5 in {tmp}/workers.toml: expected an integer"]),
    ("config-nesterov-text", ["--config", "{tmp}/nesterov.toml"],
     ['nesterov = "yes" in {tmp}/nesterov.toml: expected true or false']),
    ("config-drops-number", ["--config", "{tmp}/drops.toml"],
     ["drops = 30 in {tmp}/drops.toml: expected a list of numbers"]),
    ("config-lr-bool", ["--config", "{tmp}/lr.toml"],
     ["lr = true in {tmp}/lr.toml: expected a number"]),
    ("config-straggle-text", ["--config", "{tmp}/straggle.toml"],
     ['straggle = "1:2" in {tmp}/straggle.toml: expected a list of strings']),
    ("config-nan", ["--config", "{tmp}/nan.toml"], ["--lr", "nan"]),
    ("config-not-toml", ["--config", "{tmp}/broken.toml"],
     ["{tmp}/broken.toml is not valid TOML", "line 1, column 6"]),
    ("config-eval-zero", ["--config", "{tmp}/eval-zero.toml"], ["--eval-every '0'", "above 0"]),
    ("config-eval-zero-seconds", ["--config", "{tmp}/eval-zero-seconds.toml"],
     ["--eval-every '0s'", "above 0"]),
    ("config-eval-negative", ["--config", "{tmp}/eval-negative.toml"], ["--eval-every '-30'"]),
    ("config-eval-huge", ["--config", "{tmp}/eval-huge.toml"],
     ["--eval-every '10000000000'", "at most"]),
    ("config-eval-word", ["--config", "{tmp}/eval-word.toml"], ["--eval-every 'often'"]),
    ("config-checkpoint-negative", ["--config", "{tmp}/checkpoint-negative.toml"],
     ["--checkpoint-every", "-5"]),
    ("config-checkpoint-huge", ["--config", "{tmp}/checkpoint-huge.toml"],
     ["--checkpoint-every", "99999999999"]),
    ("config-period-zero", ["--config", "{tmp}/period-zero.toml"], ["--period", "got 0"]),
    ("config-period-word", ["--config", "{tmp}/period-word.toml"],
     ['period = "sixteen"', "expected an integer"]),
    ("config-global-period-negative", ["--config", "{tmp}/global-period-negative.toml"],
     ["--global-period", "-64"]),
    ("config-gossip-period-huge", ["--config", "{tmp}/gossip-period-huge.toml"],
     ["--gossip-period", "10000000000"]),
    ("config-leader-window-zero", ["--config", "{tmp}/leader-window-zero.toml"],
     ["--leader-window", "got 0"]),
    ("config-steps-negative", ["--config", "{tmp}/steps-negative.toml"], ["--steps", "-10"]),
    ("config-steps-fraction", ["--config", "{tmp}/steps-fraction.toml"],
     ["steps = 10.5", "expected an integer"]),
    ("config-epochs-zero", ["--config", "{tmp}/epochs-zero.toml"], ["--epochs", "0"]),
    ("config-epochs-huge", ["--config", "{tmp}/epochs-huge.toml"], ["--epochs", "1e+300"]),
    ("config-minutes-word", ["--config", "{tmp}/minutes-word.toml"],
     ['minutes = "ten"', "expected a number"]),
    ("config-minutes-inf", ["--config", "{tmp}/minutes-inf.toml"], ["--minutes", "inf"]),
    ("config-overlap-negative", ["--config", "{tmp}/overlap-negative.toml"],
     ["--overlap -2", "[0, 16)"]),
    ("config-overlap-fraction", ["--config", "{tmp}/overlap-fraction.toml"],
     ["overlap = 2.5", "expected an integer"]),
    ("config-fragments-zero", ["--config", "{tmp}/fragments-zero.toml"],
     ["--fragments", "got 0"]),
    ("config-compress-zip", ["--config", "{tmp}/compress-zip.toml"],
     ["--compress 'zip'", "none, bf16, int8"]),
    # hiding and shrinking communication
    ("overlap-negative", ["--overlap=-1"], ["--overlap -1", "[0, 16)"]),
    ("overlap-not-below-period", ["--overlap", "16"], ["--overlap 16", "below --period 16"]),
    ("overlap-huge", ["--overlap", "99999999999"], ["--overlap 99999999999"]),
    ("overlap-word", ["--overlap", "some"], ["--overlap", "some"]),
    ("fragments-zero", ["--method", "diloco", "--fragments", "0"], ["--fragments", "got 0"]),
    ("fragments-not-dividing", ["--method", "diloco", "--fragments", "3"],
     ["--fragments 3 must divide --period 16"]),
    ("fragments-lsgd-not-dividing", ["--fragments", "3", "--period", "8"],
     ["--fragments 3 must divide --period 8"]),
    ("fragments-lsgd-async", ["--fragments", "2", "--async"], ["--fragments 2", "drop --async"]),
    ("election-word", ["--election", "soon"], ["--election", "soon", "early"]),
    ("election-diloco", ["--method", "diloco", "--election", "early"],
     ["--election early", "--method lsgd"]),
    ("election-async", ["--election", "early", "--async"], ["--election early", "drop --async"]),
    ("compress-zip", ["--compress", "zip"], ["--compress", "zip", "bf16"]),
    ("compress-allreduce", ["--method", "allreduce", "--compress", "int8"],
     ["--compress 'int8'", "--method allreduce takes one of none, bf16"]),
    # all-reduce's gradient hooks (PyTorch's bf16 and PowerSGD)
    ("overlap-allreduce", ["--method", "allreduce", "--overlap", "2"],
     ["--overlap 2", "not of allreduce", "allreduce takes", "--powersgd"]),
    ("powersgd-lsgd", ["--powersgd", "2"], ["--powersgd 2", "--method allreduce"]),
    ("powersgd-and-bf16", ["--method", "allreduce", "--powersgd", "2", "--compress", "bf16"],
     ["--powersgd 2 and --compress bf16", "give one"]),
    ("powersgd-warmup-one", ["--method", "allreduce", "--powersgd", "2",
                             "--powersgd-warmup", "1"], ["--powersgd-warmup 1", "at least 2"]),
    ("powersgd-warmup-alone", ["--method", "allreduce", "--powersgd-warmup", "5"],
     ["--powersgd-warmup 5", "--powersgd RANK"]),
    ("powersgd-negative", ["--method", "allreduce", "--powersgd=-1"], ["--powersgd", "got -1"]),
    ("powersgd-threads", ["--method", "allreduce", "--powersgd", "2", "--backend", "threads"],
     ["--powersgd with allreduce", "drop --backend threads"]),
    ("bf16-allreduce-threads", ["--method", "allreduce", "--compress", "bf16", "--backend",
                                "threads"], ["--compress bf16 with allreduce", "drop --backend"]),
    # language models and text
    ("text-without-a-file", ["--dataset", "text", "--model", "gpt"],
     ["--dataset text", "--data-dir FILE_OR_FOLDER"]),
    ("text-missing", ["--dataset", "text", "--model", "gpt", "--data-dir", "{tmp}/nowhere.txt"],
     ["{tmp}/nowhere.txt", "no such file or folder"]),
    ("text-empty", ["--dataset", "text", "--model", "gpt", "--data-dir", "{tmp}/empty.txt"],
     ["{tmp}/empty.txt", "is empty"]),
    ("text-binary", ["--dataset", "text", "--model", "gpt", "--data-dir", "{tmp}/binary.bin"],
     ["{tmp}/binary.bin is binary", "NUL byte at offset 3"]),
    ("text-not-utf8", ["--dataset", "text", "--model", "gpt", "--data-dir", "{tmp}/latin1.txt"],
     ["{tmp}/latin1.txt is not UTF-8", "byte 0xe9"]),
    ("text-shorter-than-a-window", ["--dataset", "text", "--model", "gpt", "--data-dir",
                                    "{tmp}/short.txt"],
     ["shorter than one window of context=128 + 1 bytes", "shorter context"]),
    ("gpt-on-images", ["--model", "gpt"], ["--model gpt is a language model", "--dataset kjv"]),
    ("image-model-on-text", ["--dataset", "kjv", "--model", "cnn7"],
     ["--model cnn7 on --dataset kjv", "gpt or hf-gpt2"]),
    ("heads-not-dividing", ["--dataset", "kjv", "--model", "gpt", "--heads", "3"],
     ["--heads 3 must divide --width 128"]),
    ("layers-for-an-image-model", ["--layers", "2"], ["--layers 2", "size a language model"]),
    ("context-zero", ["--dataset", "kjv", "--model", "gpt", "--context", "0"],
     ["--context", "got 0"]),
    ("width-huge", ["--dataset", "kjv", "--model", "gpt", "--width", "999999999"],
     ["--width", "at most 65536"]),
    ("augment-text", ["--dataset", "kjv", "--model", "gpt", "--augment", "flip"],
     ["--augment flip", "for images"]),
    ("target-accuracy-above-one", ["--target", "1.5"], ["--target 1.5", "(0, 1]"]),
    ("target-loss-negative", ["--dataset", "kjv", "--model", "gpt", "--target=-1"],
     ["--target -1", "nats per byte"]),
    ("target-elastic", ["--elastic", "--target", "0.8"], ["--elastic", "drop", "--target"]),
    ("overlap-dpsgd", ["--method", "dpsgd", "--overlap", "2"], ["--overlap 2", "not of dpsgd"]),
    ("overlap-async", ["--overlap", "2", "--async"], ["--overlap 2", "--async"]),
    # elastic training
    ("elastic-dpsgd", ["--elastic", "--method", "dpsgd"], ["--elastic", "not dpsgd"]),
    ("elastic-overlap-nodes", ["--elastic", "--workers", "4", "--groups", "2", "--overlap", "2"],
     ["--elastic with --overlap runs one replica per node", "--replica node", "--groups 4"]),
    ("elastic-overlap-late", ["--elastic", "--period", "16", "--overlap", "8", "--fragments", "2"],
     ["--elastic --overlap 8", "below period / fragments = 8"]),
    ("elastic-checkpoints", ["--elastic", "--checkpoint-every", "10"],
     ["drop --checkpoint-every"]),
    ("elastic-slot", ["--elastic", "--workers", "4", "--groups", "2", "--slot", "2",
                      "--lighthouse", "http://127.0.0.1:29510"], ["--slot 2", "[0, 2)"]),
    ("elastic-slot-alone", ["--elastic", "--slot", "0"], ["--lighthouse and --slot"]),
    ("elastic-min-workers", ["--elastic", "--workers", "2", "--min-workers", "3"],
     ["--min-workers 3", "at most the 2 nodes"]),
    ("min-workers-alone", ["--min-workers", "2"], ["--min-workers", "add it"]),
    ("join-timeout-zero", ["--elastic", "--join-timeout", "0"], ["--join-timeout", "got 0"]),
    ("merge-lsgd", ["--merge", "mix"], ["--merge mix", "--method local-sgd or diloco, not of lsgd"]),
    ("merge-without-overlap", ["--method", "diloco", "--merge", "replace"],
     ["--merge replace", "add --overlap K"]),
    ("error-feedback-uncompressed", ["--method", "diloco", "--error-feedback"],
     ["--error-feedback", "--compress (bf16, int8, 2bit or topk)"]),
    # sparse, error-corrected messages and the methods built on them
    ("density-zero", ["--method", "diloco", "--compress", "topk", "--density", "0"],
     ["--density must be in (0, 1], got 0"]),
    ("density-above-one", ["--method", "sparseloco", "--density", "1.5"],
     ["--density must be in (0, 1], got 1.5"]),
    ("density-negative", ["--method", "diloco", "--compress", "topk", "--density", "-0.01"],
     ["--density must be in (0, 1], got -0.01"]),
    ("density-without-topk", ["--method", "diloco", "--density", "0.01"],
     ["--density 0.01", "--compress topk", "add it"]),
    ("values-unknown", ["--method", "sparseloco", "--values", "4bit"],
     ["--values", "'4bit'", "'float32', 'int8', '2bit'"]),
    ("topk-on-lsgd", ["--method", "lsgd", "--compress", "topk"],
     ["--compress 'topk'", "--method lsgd takes one of none, bf16, int8"]),
    ("topk-on-allreduce", ["--method", "allreduce", "--compress", "2bit"],
     ["--compress '2bit'", "--method allreduce takes one of none, bf16"]),
    ("sparseloco-codec", ["--method", "sparseloco", "--compress", "int8"],
     ["--compress int8", "not of sparseloco", "--density"]),
    ("demo-overlap", ["--method", "demo", "--overlap", "2"],
     ["--overlap must be an integer in [0, 1], got 2"]),
    ("demo-leader", ["--method", "demo", "--leader", "pull"],
     ["--leader pull", "not of demo"]),
    ("demo-optimizer", ["--method", "demo", "--optimizer", "adamw"],
     ["--optimizer adamw", "demo needs --optimizer sgd --momentum 0.0"]),
    ("muloco-optimizer", ["--method", "muloco", "--optimizer", "sgd"],
     ["--optimizer sgd", "muloco needs --optimizer muon"]),
    ("topk-elastic", ["--method", "diloco", "--compress", "topk", "--elastic",
                      "--workers", "2"], ["--compress topk with --elastic"]),
    ("config-missing", ["--config", "{tmp}/nowhere.toml"],
     ["--config {tmp}/nowhere.toml", "no such file"]),
    ("config-a-folder", ["--config", "{tmp}/cifar"], ["{tmp}/cifar", "cannot read"]),
]


@pytest.fixture
def no_workers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Fail the test if a worker would start (the mistake was not caught before); run
    in ``tmp_path``, where the default run folders would go."""
    def start(*args: object, **kwargs: object) -> None:
        raise AssertionError("workers would start")

    monkeypatch.setattr(lsgd, "launch", start)
    monkeypatch.setattr(lsgd, "simulate", start)
    monkeypatch.chdir(tmp_path)


def _fill(items: list[str], tmp: Path) -> list[str]:
    return [item.replace("{tmp}", str(tmp)) for item in items]


def _assert_reported(argv: list[str], expected: list[str],
                     capsys: pytest.CaptureFixture[str]) -> None:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert "Traceback" not in err
    for part in expected:
        assert part in err, f"{part!r} not in {err!r}"


@pytest.mark.parametrize("args,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_exits_2_naming_it(args: list[str], expected: list[str], workdir: Path,
                                     no_workers: None,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    _assert_reported([*BASE, *_fill(args, workdir)], _fill(expected, workdir), capsys)


def test_out_that_cannot_be_created(no_workers: None,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/proc/self").exists():
        pytest.skip("no /proc on this system")
    _assert_reported([*BASE, "--out", "/proc/x/run"],
                     ["--out /proc/x/run", "cannot create or write", "choose another --out"],
                     capsys)


def test_out_that_is_not_writable(tmp_path: Path, no_workers: None,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        _assert_reported([*BASE, "--out", str(locked)],
                         [f"--out {locked}", "Permission denied", "choose another --out"], capsys)
        _assert_reported([*BASE, "--out", str(locked / "run")],
                         [f"--out {locked / 'run'}", "Permission denied"], capsys)
    finally:
        locked.chmod(0o700)


@pytest.mark.parametrize("args,expected", [
    (["--lr", "nan"], ["--lr", "nan"]),
    (["--out", "{tmp}/file/run"], ["--out {tmp}/file/run", "cannot create or write"]),
    (["--config", "{tmp}/pull.toml"], ['pull = "a lot"', "expected a number"]),
], ids=["lr-nan", "out-under-a-file", "config-wrong-type"])
def test_the_command_exits_2_without_a_traceback(args: list[str], expected: list[str],
                                                  workdir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "lsgd", *BASE, *_fill(args, workdir)],
                          capture_output=True, text=True, env=env, cwd=workdir, timeout=300)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    for part in _fill(expected, workdir):
        assert part in done.stderr
    assert not (workdir / "runs").exists(), "no default run folder either"
