"""The suite, laid out like the package: one folder per subpackage of seq2seq, plus the commands end
to end (commands/), the pages (docs/) and the benchmarks (bench/). Packages, so that two folders may
hold files of the same name and each test id stays unique."""
