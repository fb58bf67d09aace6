from postroom.cli.main import main

main()
