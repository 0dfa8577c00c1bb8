from dpcli.cli import main

main()
