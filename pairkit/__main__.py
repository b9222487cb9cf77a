from pairkit.cli.main import main

main()
