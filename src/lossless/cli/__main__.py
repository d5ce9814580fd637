from lossless.cli import main

main()
